import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { applyPlan } from '../../client/apply-plan.js';
import { ContainerStore, type ContainerRecord } from '../../daemon/containers/container-store.js';
import { removeLabelled, type EngineTarget } from '../../daemon/containers/engine-cli.js';
import { SessionContainers, type ContainerRequest } from '../../daemon/containers/session-containers.js';
import { ownerLabel } from '../../daemon/containers/wiring.js';
import { createLogger } from '../../daemon/logger.js';
import { hardenFlags } from '../../daemon/plan/harden.js';
import type { SubprocessOptions, SubprocessResult } from '../../daemon/subprocess.js';
import { fakeProbe } from './fake-probe.js';

const logger = createLogger({ kind: 'silent' });
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync('/tmp/sbx-containers-');
  dirs.push(dir);
  return dir;
}


function record(key: string, pid: number, startTime: string | null = 'boot-1'): ContainerRecord {
  return { key, sessionId: key, engine: 'podman', clientPid: pid, clientStartTime: startTime, path: '/usr/bin', env: {}, globalArgs: [] };
}

function request(sessionId: string, pid: number, extra: Partial<ContainerRequest> = {}): ContainerRequest {
  return { sessionId, engine: 'podman', path: '/usr/bin', env: { CONTAINERS_CONF: '/c.conf' }, globalArgs: [], clientPid: pid, clientStartTime: 'boot-1', ...extra };
}

function setup(inherited: ContainerRecord[] = [], failing = new Set<string>()) {
  let now = 0;
  const dir = path.join(tempDir(), 'containers');
  const probe = fakeProbe();
  const live = new Set<string>();
  const removed: { key: string; owner: string }[] = [];
  /** What is on disk after each save, and what each save changed. */
  const saved: ContainerRecord[][] = [];
  const changed: string[][] = [];
  const onDisk = new Map<string, ContainerRecord>();
  const containers = new SessionContainers({
    dir,
    owner: 'owner0123456789ab',
    probe,
    clock: { now: () => now, monotonic: () => now },
    isLive: (id) => live.has(id),
    claimWindowMs: 60_000,
    load: () => Promise.resolve(inherited),
    save: (changes) => {
      for (const { key, record: entry } of changes) {
        if (entry === null) onDisk.delete(key);
        else onDisk.set(key, entry);
      }
      changed.push(changes.map((change) => change.key));
      saved.push([...onDisk.values()]);
      return Promise.resolve();
    },
    remove: (entry, labels) => {
      if (failing.has(labels.session)) return Promise.reject(new SandboxdError('CONTAINER_REMOVE_FAILED', 'engine down'));
      removed.push({ key: labels.session, owner: labels.owner });
      return Promise.resolve([`cid-of-${entry.key}`]);
    },
    ensureDir: async (target) => {
      const { mkdir } = await import('node:fs/promises');
      await mkdir(target, { recursive: true, mode: 0o700 });
    },
    logger,
  });
  return { containers, probe, live, removed, saved, changed, dir, advance: (ms: number) => (now += ms) };
}

describe('SessionContainers', () => {
  it('labels the container with its session and this daemon, names a fresh cidfile, and records it first', async () => {
    const { containers, saved, dir } = setup();
    const prepared = await containers.prepare(request('ses_aaaaaaaa', 100));
    const cidfile = path.join(dir, 'ses_aaaaaaaa.cid');
    expect(prepared.flags).toEqual(['--label', 'sandboxd.session=ses_aaaaaaaa', '--label', 'sandboxd.owner=owner0123456789ab', '--cidfile', cidfile]);
    expect(prepared.container).toEqual({ id: null, cidfile });
    expect(saved.at(-1)?.map((entry) => entry.key)).toEqual(['ses_aaaaaaaa']);
    expect(saved.at(-1)?.[0]?.env).toEqual({ CONTAINERS_CONF: '/c.conf' });
  });

  it('writes only the record that changed, however many are held', async () => {
    const { containers, saved, changed } = setup([record('ses_inherited', 100)]);
    for (const key of ['ses_aaaaaaaa', 'ses_bbbbbbbb', 'ses_cccccccc']) await containers.prepare(request(key, 100));
    expect(changed).toEqual([['ses_aaaaaaaa'], ['ses_bbbbbbbb'], ['ses_cccccccc']]);
    await containers.ended('ses_bbbbbbbb', 'released');
    expect(changed.at(-1)).toEqual(['ses_bbbbbbbb']);
    expect(saved.at(-1)?.map((entry) => entry.key)).toEqual(['ses_aaaaaaaa', 'ses_cccccccc']);
  });

  it('shows the id the engine wrote to the cidfile', async () => {
    const { containers } = setup();
    const { container } = await containers.prepare(request('ses_aaaaaaaa', 100));
    expect(await containers.describe('ses_aaaaaaaa')).toEqual({ id: null, cidfile: container.cidfile });
    writeFileSync(container.cidfile, 'ab'.repeat(32));
    expect((await containers.describe('ses_aaaaaaaa'))?.id).toBe('ab'.repeat(32));
    expect(await containers.describe('ses_unknown1')).toBeNull();
  });

  it.each(['client-exited', 'lease-expired', 'removed'] as const)('removes the container of a session that ended with %s', async (reason) => {
    const { containers, removed, saved } = setup();
    await containers.prepare(request('ses_aaaaaaaa', 100));
    expect(await containers.ended('ses_aaaaaaaa', reason)).toEqual(['cid-of-ses_aaaaaaaa']);
    expect(removed).toEqual([{ key: 'ses_aaaaaaaa', owner: 'owner0123456789ab' }]);
    expect(saved.at(-1)).toEqual([]);
    expect(await containers.ended('ses_aaaaaaaa', reason)).toEqual([]);
    expect(removed).toHaveLength(1);
  });

  it('leaves a released session\'s container alone and forgets it', async () => {
    const { containers, removed, saved } = setup();
    const { container } = await containers.prepare(request('ses_aaaaaaaa', 100));
    writeFileSync(container.cidfile, 'ab'.repeat(32));
    expect(await containers.ended('ses_aaaaaaaa', 'released')).toEqual([]);
    expect(removed).toEqual([]);
    expect(saved.at(-1)).toEqual([]);
    expect(() => readFileSync(container.cidfile)).toThrow();
  });

  it('keeps the records on shutdown, for the next daemon', async () => {
    const { containers, removed, saved } = setup();
    await containers.prepare(request('ses_aaaaaaaa', 100));
    const writes = saved.length;
    expect(await containers.ended('ses_aaaaaaaa', 'shutdown')).toEqual([]);
    expect(removed).toEqual([]);
    expect(saved).toHaveLength(writes);
    expect(containers.has('ses_aaaaaaaa')).toBe(true);
  });

  it('at start-up removes what a killed daemon left whose client is gone, and keeps the rest waiting', async () => {
    const { containers, probe, removed } = setup([record('ses_deadclient', 100), record('ses_liveclient', 200), record('ses_reusedpid', 300, 'boot-old')]);
    probe.processes.set(200, 'boot-1');
    probe.processes.set(300, 'boot-new');
    await containers.sweep();
    expect(removed.map((entry) => entry.key).sort()).toEqual(['ses_deadclient', 'ses_reusedpid']);
    expect(containers.has('ses_liveclient')).toBe(true);
    probe.processes.delete(200);
    await containers.sweep();
    expect(removed.map((entry) => entry.key)).toContain('ses_liveclient');
  });

  it('removes an inherited container whose live client never renews within the claim window', async () => {
    const { containers, probe, removed, advance } = setup([record('ses_silentone', 200)]);
    probe.processes.set(200, 'boot-1');
    advance(59_000);
    await containers.sweep();
    expect(removed).toEqual([]);
    advance(2_000);
    await containers.sweep();
    expect(removed.map((entry) => entry.key)).toEqual(['ses_silentone']);
  });

  it('hands an inherited container to the lease its own client renews, and removes both when that one dies', async () => {
    const { containers, probe, removed, live, advance } = setup([record('ses_oldlease1', 200)]);
    probe.processes.set(200, 'boot-1');
    await containers.prepare(request('ses_newlease1', 200, { renews: 'ses_oldlease1' }));
    live.add('ses_newlease1');
    advance(120_000);
    await containers.sweep();
    expect(removed).toEqual([]);
    expect(containers.has('ses_oldlease1')).toBe(false);
    expect((await containers.describe('ses_newlease1'))?.cidfile).toMatch(/ses_oldlease1\.cid$/);
    await containers.ended('ses_newlease1', 'client-exited');
    expect(removed.map((entry) => entry.key).sort()).toEqual(['ses_newlease1', 'ses_oldlease1']);
  });

  it('does not hand an inherited container to another process naming its lease', async () => {
    const { containers, probe } = setup([record('ses_oldlease1', 200)]);
    probe.processes.set(200, 'boot-1');
    await containers.prepare(request('ses_intruder1', 201, { renews: 'ses_oldlease1' }));
    expect(containers.has('ses_oldlease1')).toBe(true);
  });

  it('forgets an inherited container its client releases under the old lease', async () => {
    const { containers, probe, removed } = setup([record('ses_oldlease1', 200)]);
    probe.processes.set(200, 'boot-1');
    await containers.ended('ses_oldlease1', 'released');
    probe.processes.delete(200);
    await containers.sweep();
    expect(removed).toEqual([]);
  });

  it('keeps a record whose removal failed for the next daemon, without retrying it every sweep', async () => {
    const { containers, saved, probe } = setup([], new Set(['ses_aaaaaaaa']));
    await containers.prepare(request('ses_aaaaaaaa', 100));
    await expect(containers.ended('ses_aaaaaaaa', 'client-exited')).rejects.toMatchObject({ code: 'CONTAINER_REMOVE_FAILED' });
    expect(saved.at(-1)?.map((entry) => entry.key)).toEqual(['ses_aaaaaaaa']);
    probe.processes.clear();
    await containers.sweep();
    expect(saved.at(-1)?.map((entry) => entry.key)).toEqual(['ses_aaaaaaaa']);
  });
});

describe('removeLabelled', () => {
  function fakeEngine(answers: SubprocessResult[]) {
    const calls: { file: string; args: readonly string[]; options: SubprocessOptions }[] = [];
    return {
      calls,
      deps: {
        home: '/home/u',
        findExecutable: (name: string, searchPath: string) => Promise.resolve(name === 'podman-remote' ? null : `${searchPath}/${name}`),
        run: (file: string, args: readonly string[], options: SubprocessOptions) => {
          calls.push({ file, args, options });
          return Promise.resolve(answers.shift() ?? { exitCode: 0, stdout: '', stderr: '' });
        },
      },
    };
  }
  const podman: EngineTarget = { engine: 'podman', path: '/opt/bin', env: { CONTAINERS_CONF: '/c.conf' }, globalArgs: ['--connection', 'vm'] };
  const labels = { session: 'ses_aaaaaaaa', owner: 'o1' };

  it('lists by both labels and kills at once, with only the session\'s PATH, HOME and engine variables', async () => {
    const { calls, deps } = fakeEngine([{ exitCode: 0, stdout: 'c1\nc2', stderr: '' }]);
    expect(await removeLabelled(podman, labels, deps)).toEqual(['c1', 'c2']);
    expect(calls.map((call) => [call.file, ...call.args])).toEqual([
      ['/opt/bin/podman', '--connection', 'vm', 'ps', '-a', '-q', '--no-trunc', '--filter', 'label=sandboxd.session=ses_aaaaaaaa', '--filter', 'label=sandboxd.owner=o1'],
      ['/opt/bin/podman', '--connection', 'vm', 'rm', '-f', '--time', '0', 'c1', 'c2'],
    ]);
    expect(calls[1]?.options.env).toEqual({ CONTAINERS_CONF: '/c.conf', PATH: '/opt/bin', HOME: '/home/u' });
    expect(calls[1]?.options.timeoutMs).toBeLessThanOrEqual(15_000);
  });

  it('runs nothing more when no container carries the labels', async () => {
    const { calls, deps } = fakeEngine([{ exitCode: 0, stdout: '', stderr: '' }]);
    expect(await removeLabelled({ ...podman, engine: 'docker', globalArgs: [] }, labels, deps)).toEqual([]);
    expect(calls).toHaveLength(1);
  });

  it('takes a failed rm of a container that went away by itself as done', async () => {
    const { deps } = fakeEngine([
      { exitCode: 0, stdout: 'c1', stderr: '' },
      { exitCode: 1, stdout: '', stderr: 'Error: no such container c1' },
      { exitCode: 0, stdout: '', stderr: '' },
    ]);
    expect(await removeLabelled({ ...podman, engine: 'docker' }, labels, deps)).toEqual(['c1']);
  });

  it('fails with CONTAINER_REMOVE_FAILED when the engine cannot list or remove', async () => {
    const listing = fakeEngine([{ exitCode: 125, stdout: '', stderr: 'Error: cannot connect' }]);
    await expect(removeLabelled(podman, labels, listing.deps)).rejects.toThrow(/ps` failed: Error: cannot connect/);
    const stuck = fakeEngine([
      { exitCode: 0, stdout: 'c1', stderr: '' },
      { exitCode: null, stdout: '', stderr: 'timed out' },
      { exitCode: 0, stdout: 'c1', stderr: '' },
    ]);
    await expect(removeLabelled(podman, labels, stuck.deps)).rejects.toThrow(/rm -f c1` failed: timed out/);
    const missing = { ...fakeEngine([]).deps, findExecutable: () => Promise.resolve(null) };
    await expect(removeLabelled(podman, labels, missing)).rejects.toMatchObject({ code: 'CONTAINER_REMOVE_FAILED' });
  });
});

describe('ContainerStore', () => {
  function store() {
    const state = tempDir();
    const dir = path.join(state, 'containers');
    const legacy = path.join(state, 'containers.json');
    return { dir, legacy, open: () => new ContainerStore(dir, legacy, logger) };
  }

  it('round-trips records, one file each, and ignores one that is not in its shape', async () => {
    const { dir, open } = store();
    await open().save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 100) }, { key: 'ses_bbbbbbbb', record: record('ses_bbbbbbbb', 1) }]);
    expect(readdirSync(dir).sort()).toEqual(['ses_aaaaaaaa.json', 'ses_bbbbbbbb.json']);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(dir, 'ses_aaaaaaaa.json')).mode & 0o777).toBe(0o600);
    expect((await open().load()).map((entry) => entry.key).sort()).toEqual(['ses_aaaaaaaa', 'ses_bbbbbbbb']);
    writeFileSync(path.join(dir, 'ses_cccccccc.json'), JSON.stringify({ ...record('ses_cccccccc', 2), env: { LD_PRELOAD: '/x' } }));
    writeFileSync(path.join(dir, 'ses_dddddddd.json'), 'not json');
    // A record must be named by its own key: a file cannot speak for another session's container.
    writeFileSync(path.join(dir, 'ses_eeeeeeee.json'), JSON.stringify(record('ses_ffffffff', 3)));
    // A write a kill -9 interrupted is cleared away.
    writeFileSync(path.join(dir, '.ses_gggggggg.json.1.abc.tmp'), '{');
    expect((await open().load()).map((entry) => entry.key).sort()).toEqual(['ses_aaaaaaaa', 'ses_bbbbbbbb']);
    expect(readdirSync(dir).some((name) => name.endsWith('.tmp'))).toBe(false);
  });

  it('creates a first record in place, replaces one written before (by itself or a previous daemon), and clears an empty one', async () => {
    const { dir, open } = store();
    const file = path.join(dir, 'ses_aaaaaaaa.json');
    const first = open();
    await first.save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 100) }]);
    await first.save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 200) }]);
    expect((JSON.parse(readFileSync(file, 'utf8')) as ContainerRecord).clientPid).toBe(200);
    // A daemon started later, before it loaded the records, writes the same key: the file is replaced.
    await open().save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 300) }]);
    expect((JSON.parse(readFileSync(file, 'utf8')) as ContainerRecord).clientPid).toBe(300);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // A daemon killed between creating a record and writing it leaves it empty: its plan was never handed out.
    writeFileSync(path.join(dir, 'ses_bbbbbbbb.json'), '');
    expect((await open().load()).map((entry) => [entry.key, entry.clientPid])).toEqual([['ses_aaaaaaaa', 300]]);
    expect(readdirSync(dir)).toEqual(['ses_aaaaaaaa.json']);
  });

  it('forgets a record by removing its file, after a write of the same key queued before', async () => {
    const { dir, open } = store();
    const subject = open();
    await Promise.all([subject.save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 100) }]), subject.save([{ key: 'ses_aaaaaaaa', record: null }])]);
    expect(readdirSync(dir)).toEqual([]);
    expect(await open().load()).toEqual([]);
  });

  it('folds in the single containers.json of an earlier release, then removes it', async () => {
    const { dir, legacy, open } = store();
    await open().save([{ key: 'ses_aaaaaaaa', record: record('ses_aaaaaaaa', 100) }]);
    writeFileSync(legacy, JSON.stringify({ version: 1, containers: [record('ses_aaaaaaaa', 999), record('ses_bbbbbbbb', 1)] }));
    const loaded = await open().load();
    expect(loaded.map((entry) => [entry.key, entry.clientPid])).toEqual([['ses_aaaaaaaa', 100], ['ses_bbbbbbbb', 1]]);
    expect(existsSync(legacy)).toBe(false);
    expect(readdirSync(dir).sort()).toEqual(['ses_aaaaaaaa.json', 'ses_bbbbbbbb.json']);
  });
});

describe('owner label', () => {
  it('differs by user and by state dir', () => {
    expect(ownerLabel(1000, '/s')).toMatch(/^[0-9a-f]{16}$/);
    expect(ownerLabel(1000, '/s')).toBe(ownerLabel(1000, '/s'));
    expect(ownerLabel(1001, '/s')).not.toBe(ownerLabel(1000, '/s'));
    expect(ownerLabel(1000, '/t')).not.toBe(ownerLabel(1000, '/s'));
  });
});

describe('hardened profile', () => {
  const plan = (flags: string[]) => ({ args: flags, spawnEnv: {}, globalArgs: [] });

  it('adds a read-only root, a tmpfs /tmp, no capabilities, no-new-privileges and a pids limit', () => {
    const { args } = applyPlan(['run', 'img', 'sh'], plan(hardenFlags()));
    expect(args).toEqual(['run', '--read-only', '--tmpfs', '/tmp', '--cap-drop=ALL', '--security-opt', 'no-new-privileges', '--pids-limit', '2048', 'img', 'sh']);
  });

  it('lets what the caller passes already win, without repeating anything', () => {
    const caller = ['run', '--pids-limit', '100', '--tmpfs', '/tmp:size=1m', '--read-only', '--security-opt', 'no-new-privileges', 'img'];
    const { args, skipped } = applyPlan(caller, plan(hardenFlags()));
    expect(args).toEqual(['run', '--pids-limit', '100', '--tmpfs', '/tmp:size=1m', '--read-only', '--security-opt', 'no-new-privileges', '--cap-drop=ALL', 'img']);
    expect(skipped.map((entry) => entry.key).sort()).toEqual(['/tmp', 'pids-limit', 'read-only', 'security-opt']);
  });
});
