import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { applyPlan } from '../../client/apply-plan.js';
import { ContainerStore, type ContainerRecord } from '../../daemon/containers/container-store.js';
import { removeLabelled, type EngineTarget } from '../../daemon/containers/engine-cli.js';
import { SessionContainers, type ContainerRequest } from '../../daemon/sessions/session-containers.js';
import { ownerLabel } from '../../daemon/composition/containers.js';
import { createLogger } from '../../daemon/os/logger.js';
import { hardenFlags } from '../../daemon/plan/harden.js';
import type { SubprocessOptions, SubprocessResult } from '../../daemon/os/subprocess.js';
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

const SELF = { pid: 4242, startTime: 'self-boot' };

interface SetupOptions {
  released?: ContainerRecord[];
  failing?: Set<string>;
  /** When the released records are read (at once unless given). */
  releasedLoad?: Promise<ContainerRecord[]>;
}

function setup(inherited: ContainerRecord[] = [], { released = [], failing = new Set<string>(), releasedLoad = Promise.resolve(released) }: SetupOptions = {}) {
  let now = 0;
  const dir = path.join(tempDir(), 'containers');
  const probe = fakeProbe();
  probe.processes.set(SELF.pid, SELF.startTime);
  const live = new Set<string>();
  const removed: { key: string; owner: string }[] = [];
  /** What is on disk after each save, and what each save changed. */
  const saved: ContainerRecord[][] = [];
  const changed: string[][] = [];
  const onDisk = new Map<string, ContainerRecord>();
  const releasedOnDisk = new Set(released.map((entry) => entry.key));
  /** The engine's owner-labelled session containers: id → session label; and what was removed by id. */
  const engine = new Map<string, string>();
  /** Ids of those containers that are not running (created, exited). */
  const stopped = new Set<string>();
  /** Sessions whose stopped containers the engine was asked to remove. */
  const tidied: string[] = [];
  const removedIds: string[] = [];
  const state = { stray: false, diskFull: false, listings: 0, listFailures: 0 };
  /** Work the containers put off until a quiet moment: run by `quiet()`. */
  const deferred: (() => void)[] = [];
  const quiet = async (): Promise<void> => {
    for (const work of deferred.splice(0)) work();
    // Every edge here answers at once: the work's promise chain is done before the next macrotask.
    await new Promise((resolve) => setImmediate(resolve));
  };
  const containers = new SessionContainers({
    dir,
    owner: 'owner0123456789ab',
    self: SELF,
    probe,
    clock: { now: () => now, monotonic: () => now },
    isLive: (id) => live.has(id),
    claimWindowMs: 60_000,
    unrecordedSweepMs: 3_600_000,
    defer: (work) => {
      deferred.push(work);
    },
    strayAnswers: () => Promise.resolve(state.stray),
    load: () => Promise.resolve(inherited),
    loadReleased: () => releasedLoad,
    save: (changes) => {
      if (state.diskFull && changes.some((change) => change.kind === 'write')) return Promise.reject(new Error('ENOSPC: no space left on device, write'));
      for (const change of changes) {
        if (change.kind === 'write') onDisk.set(change.key, change.record);
        else if (change.kind === 'forget') onDisk.delete(change.key);
        else if (change.kind === 'release') {
          onDisk.delete(change.key);
          releasedOnDisk.add(change.key);
        } else releasedOnDisk.delete(change.key);
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
    listOwned: () => {
      state.listings += 1;
      if (state.listFailures > 0) {
        state.listFailures -= 1;
        return Promise.reject(new SandboxdError('CONTAINER_REMOVE_FAILED', '`podman ps` failed: exit killed'));
      }
      return Promise.resolve([...engine].map(([id, session]) => ({ id, session, stopped: stopped.has(id) })));
    },
    removeStopped: (_entry, labels) => {
      tidied.push(labels.session);
      const mine = [...engine].filter(([, session]) => session === labels.session).map(([id]) => id);
      const gone = mine.filter((id) => stopped.has(id));
      for (const id of gone) engine.delete(id);
      removedIds.push(...gone);
      return Promise.resolve({ removed: gone, running: mine.length - gone.length });
    },
    removeOwned: (_target, ids) => {
      for (const id of ids) engine.delete(id);
      removedIds.push(...ids);
      return Promise.resolve();
    },
    ensureDir: async (target) => {
      const { mkdir } = await import('node:fs/promises');
      await mkdir(target, { recursive: true, mode: 0o700 });
    },
    logger,
  });
  return { containers, probe, live, removed, saved, changed, dir, engine, stopped, tidied, removedIds, releasedOnDisk, state, quiet, advance: (ms: number) => (now += ms) };
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

  it('leaves a released session\'s container alone and sets its record aside', async () => {
    const { containers, removed, saved, releasedOnDisk } = setup();
    const { container } = await containers.prepare(request('ses_aaaaaaaa', 100));
    writeFileSync(container.cidfile, 'ab'.repeat(32));
    expect(await containers.ended('ses_aaaaaaaa', 'released')).toEqual([]);
    expect(removed).toEqual([]);
    expect(saved.at(-1)).toEqual([]);
    expect([...releasedOnDisk]).toEqual(['ses_aaaaaaaa']);
    expect(containers.has('ses_aaaaaaaa')).toBe(false);
    expect(() => readFileSync(container.cidfile)).toThrow();
  });

  it('removes a released session\'s container that never started or has exited; one still running stays the client\'s', async () => {
    const { containers, engine, stopped, tidied, removedIds, releasedOnDisk } = setup();
    const created = await containers.prepare(request('ses_created01', 100));
    const running = await containers.prepare(request('ses_running01', 100));
    await containers.prepare(request('ses_notyet001', 100));
    // An interrupted run left its container created and never started; another still runs. The
    // engine wrote their cidfiles; the third plan's container was never created.
    engine.set('c-created', 'ses_created01');
    stopped.add('c-created');
    writeFileSync(created.container.cidfile, 'c'.repeat(64));
    engine.set('c-running', 'ses_running01');
    writeFileSync(running.container.cidfile, 'd'.repeat(64));
    for (const key of ['ses_created01', 'ses_running01', 'ses_notyet001']) await containers.ended(key, 'released');
    expect(removedIds).toEqual(['c-created']);
    // No engine call for a container never created: releases that ran nothing cost nothing.
    expect(tidied).toEqual(['ses_created01', 'ses_running01']);
    expect([...engine.keys()]).toEqual(['c-running']);
    // The removed one's record is forgotten; the running one's and one whose container may still come stay aside.
    expect([...releasedOnDisk].sort()).toEqual(['ses_notyet001', 'ses_running01']);
  });

  it('removes a released session\'s container once it has exited, at the next look', async () => {
    const { containers, engine, stopped, removedIds, releasedOnDisk, advance, quiet } = setup();
    const running = await containers.prepare(request('ses_running01', 100));
    engine.set('c-running', 'ses_running01');
    writeFileSync(running.container.cidfile, 'd'.repeat(64));
    await containers.ended('ses_running01', 'released');
    await containers.sweep();
    await quiet();
    expect(removedIds).toEqual([]);
    stopped.add('c-running');
    advance(3_600_000);
    await containers.sweep();
    await quiet();
    expect(removedIds).toEqual(['c-running']);
    expect([...releasedOnDisk]).toEqual([]);
  });

  it('a second end while the first removes the container shares it (sessions rm while the registry ends the session)', async () => {
    const { containers, removed } = setup();
    await containers.prepare(request('ses_aaaaaaaa', 100));
    const first = containers.ended('ses_aaaaaaaa', 'client-exited');
    const second = containers.ended('ses_aaaaaaaa', 'removed');
    expect(await second).toEqual(['cid-of-ses_aaaaaaaa']);
    expect(await first).toEqual(['cid-of-ses_aaaaaaaa']);
    expect(removed).toHaveLength(1);
  });

  it('names each engine its records use once, released ones too: where a purge looks', async () => {
    const { containers } = setup([record('ses_inherited', 100)], { released: [record('ses_released1', 101)] });
    await containers.prepare(request('ses_aaaaaaaa', 100, { engine: 'docker', env: {} }));
    const targets = await containers.targets();
    expect(targets.map((target) => target.engine).sort()).toEqual(['docker', 'podman']);
  });

  it('names this daemon in each record it writes, and in one it takes over', async () => {
    const { containers, saved, probe, live } = setup([{ ...record('ses_oldlease1', 200), daemon: { pid: 77, startTime: 'gone' } }]);
    probe.processes.set(200, 'boot-1');
    await containers.prepare(request('ses_aaaaaaaa', 100));
    expect(saved.at(-1)?.find((entry) => entry.key === 'ses_aaaaaaaa')?.daemon).toEqual(SELF);
    await containers.prepare(request('ses_newlease1', 200, { renews: 'ses_oldlease1' }));
    live.add('ses_newlease1');
    expect(saved.at(-1)?.find((entry) => entry.key === 'ses_oldlease1')).toMatchObject({ sessionId: 'ses_newlease1', daemon: SELF });
  });

  it('fails the acquire with STATE_WRITE_FAILED when its record cannot be written, and keeps nothing of it', async () => {
    const { containers, state, saved } = setup();
    state.diskFull = true;
    const failure = containers.prepare(request('ses_aaaaaaaa', 100));
    await expect(failure).rejects.toMatchObject({ code: 'STATE_WRITE_FAILED', message: expect.stringContaining('ENOSPC') as string });
    expect(containers.has('ses_aaaaaaaa')).toBe(false);
    expect(saved).toEqual([]);
    state.diskFull = false;
    await containers.prepare(request('ses_bbbbbbbb', 100));
    expect(saved.at(-1)?.map((entry) => entry.key)).toEqual(['ses_bbbbbbbb']);
  });

  it('never acts on a record whose daemon still runs, nor on one of an earlier release while a daemon of an earlier layout answers', async () => {
    const otherDaemon = { pid: 900, startTime: 'other-boot' };
    const { containers, probe, removed, state, advance } = setup([
      { ...record('ses_otherslive', 100), daemon: otherDaemon },
      { ...record('ses_othersdead', 101), daemon: otherDaemon },
      record('ses_unnamed001', 102),
      { ...record('ses_pidreused1', 103), daemon: { pid: 901, startTime: 'old-boot' } },
    ]);
    probe.processes.set(otherDaemon.pid, otherDaemon.startTime);
    probe.processes.set(901, 'new-boot');
    probe.processes.set(100, 'boot-1');
    state.stray = true;
    advance(120_000);
    await containers.sweep();
    // Only the record whose daemon's pid now belongs to another process is this daemon's to finish.
    expect(removed.map((entry) => entry.key)).toEqual(['ses_pidreused1']);
    state.stray = false;
    probe.processes.delete(otherDaemon.pid);
    await containers.sweep();
    expect(removed.map((entry) => entry.key).sort()).toEqual(['ses_othersdead', 'ses_otherslive', 'ses_pidreused1', 'ses_unnamed001']);
  });

  it('at start-up removes this owner\'s containers that no record names, keeps the released ones, and forgets released records whose container stays gone', async () => {
    const { containers, engine, removedIds, releasedOnDisk, state, advance, live, quiet } = setup([record('ses_heldone01', 100)], {
      released: [record('ses_released1', 101), record('ses_releasedgone', 102)],
    });
    // Its client renewed it with this daemon (the lease keeps the record's first id).
    live.add('ses_heldone01');
    engine.set('c-held', 'ses_heldone01');
    engine.set('c-released', 'ses_released1');
    engine.set('c-lost', 'ses_neverrecorded');
    await containers.sweep();
    // Put off until a quiet moment: nothing is asked of the engine before.
    expect(state.listings).toBe(0);
    await containers.sweep();
    await quiet();
    expect(state.listings).toBe(1);
    expect(removedIds).toEqual(['c-lost']);
    expect([...engine.keys()].sort()).toEqual(['c-held', 'c-released']);
    // A released session's container not found yet may still be starting: its record stays.
    expect([...releasedOnDisk].sort()).toEqual(['ses_released1', 'ses_releasedgone']);
    // Not again at every sweep: an hour later.
    const listings = state.listings;
    engine.set('c-lost2', 'ses_neverrecorded2');
    advance(60_000);
    await containers.sweep();
    await quiet();
    expect(state.listings).toBe(listings);
    advance(3_600_000);
    await containers.sweep();
    await quiet();
    expect(removedIds).toEqual(['c-lost', 'c-lost2']);
    expect([...releasedOnDisk]).toEqual(['ses_released1']);
  });

  it("writes an acquire's record before the released records are read, and looks for containers no record names only after", async () => {
    let loadReleased = (_records: ContainerRecord[]): void => undefined;
    const releasedLoad = new Promise<ContainerRecord[]>((resolve) => {
      loadReleased = resolve;
    });
    const { containers, engine, removedIds, state, quiet } = setup([], { releasedLoad });
    engine.set('c-released', 'ses_released1');
    engine.set('c-lost', 'ses_neverrecorded');
    // However many sessions were released lately, a plan waits only for its own record.
    expect((await containers.prepare(request('ses_acquired1', 100))).flags).toContain('--cidfile');
    await containers.sweep();
    await quiet();
    expect(state.listings).toBe(0);
    expect(removedIds).toEqual([]);
    loadReleased([record('ses_released1', 101)]);
    await quiet();
    // The client's container is accounted for; the one no record names goes.
    expect(state.listings).toBeGreaterThan(0);
    expect(removedIds).toEqual(['c-lost']);
    expect([...engine.keys()].sort()).toEqual(['c-released']);
  });

  it('leaves a released session\'s container that started after a look alone', async () => {
    const { containers, engine, removedIds, releasedOnDisk, advance, quiet } = setup();
    const look = async (after: number): Promise<void> => {
      advance(after);
      await containers.sweep();
      await quiet();
    };
    await containers.prepare(request('ses_planned01', 102));
    await containers.ended('ses_planned01', 'released');
    // The start-up look comes before the client has started the container of its plan.
    await look(0);
    engine.set('c-planned', 'ses_planned01');
    await look(3_600_000);
    expect(removedIds).toEqual([]);
    expect([...engine.keys()]).toEqual(['c-planned']);
    expect([...releasedOnDisk]).toEqual(['ses_planned01']);
  });

  it('tries a look that did not get through again 5 s later, five times in a row, then at the hourly look', async () => {
    const { containers, engine, removedIds, state, advance, quiet } = setup([], { released: [record('ses_released1', 101)] });
    // The client's container keeps its released record, which names the engine to ask.
    engine.set('c-released', 'ses_released1');
    engine.set('c-lost', 'ses_neverrecorded');
    const look = async (after: number): Promise<void> => {
      advance(after);
      await containers.sweep();
      await quiet();
    };
    // The engine did not answer in time at start-up: seconds later, not an hour later.
    state.listFailures = 1;
    await look(0);
    expect({ listings: state.listings, removed: removedIds }).toEqual({ listings: 1, removed: [] });
    await look(4_999);
    expect(state.listings).toBe(1);
    await look(1);
    expect({ listings: state.listings, removed: removedIds }).toEqual({ listings: 2, removed: ['c-lost'] });
    // An engine that keeps failing is asked five more times, then at the hourly look.
    engine.set('c-lost2', 'ses_neverrecorded2');
    state.listFailures = 6;
    await look(3_600_000);
    for (let retry = 1; retry <= 5; retry += 1) await look(5_000);
    expect({ listings: state.listings, removed: removedIds }).toEqual({ listings: 8, removed: ['c-lost'] });
    await look(5_000);
    expect(state.listings).toBe(8);
    await look(3_600_000);
    expect({ listings: state.listings, removed: removedIds }).toEqual({ listings: 9, removed: ['c-lost', 'c-lost2'] });
  });

  it('removes nothing by owner label while a daemon of an earlier layout answers', async () => {
    const { containers, engine, removedIds, state, quiet } = setup([record('ses_heldone01', 100)]);
    state.stray = true;
    engine.set('c-its', 'ses_ofthestray');
    await containers.sweep();
    await quiet();
    expect(removedIds).toEqual([]);
    expect(state.listings).toBe(0);
    // Nor when one comes up between the sweep and the quiet moment the look waited for.
    state.stray = false;
    await containers.sweep();
    state.stray = true;
    await quiet();
    expect(state.listings).toBe(0);
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

  it('forgets the record of an acquire that failed (no tombstone), and gives a container back to the lease a failed renewal took it from', async () => {
    const { containers, probe, releasedOnDisk, saved } = setup([record('ses_oldlease1', 200)]);
    probe.processes.set(200, 'boot-1');
    await containers.prepare(request('ses_failed001', 100));
    await containers.abandon('ses_failed001');
    expect(containers.has('ses_failed001')).toBe(false);
    expect([...releasedOnDisk]).toEqual([]);
    await containers.prepare(request('ses_newlease1', 200, { renews: 'ses_oldlease1' }));
    expect(containers.has('ses_oldlease1')).toBe(false);
    await containers.abandon('ses_newlease1');
    expect(containers.has('ses_oldlease1')).toBe(true);
    expect(saved.at(-1)).toEqual([expect.objectContaining({ key: 'ses_oldlease1', sessionId: 'ses_oldlease1' })]);
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
    const { containers, saved, probe } = setup([], { failing: new Set(['ses_aaaaaaaa']) });
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
    await open().save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }, { key: 'ses_bbbbbbbb', kind: 'write', record: record('ses_bbbbbbbb', 1) }]);
    expect(readdirSync(dir).sort()).toEqual(['ses_aaaaaaaa.json', 'ses_bbbbbbbb.json']);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(dir, 'ses_aaaaaaaa.json')).mode & 0o777).toBe(0o600);
    expect((await open().load()).records.map((entry) => entry.key).sort()).toEqual(['ses_aaaaaaaa', 'ses_bbbbbbbb']);
    writeFileSync(path.join(dir, 'ses_cccccccc.json'), JSON.stringify({ ...record('ses_cccccccc', 2), env: { LD_PRELOAD: '/x' } }));
    writeFileSync(path.join(dir, 'ses_dddddddd.json'), 'not json');
    // A record must be named by its own key: a file cannot speak for another session's container.
    writeFileSync(path.join(dir, 'ses_eeeeeeee.json'), JSON.stringify(record('ses_ffffffff', 3)));
    // A write a kill -9 interrupted is cleared away.
    writeFileSync(path.join(dir, '.ses_gggggggg.json.1.abc.tmp'), '{');
    expect((await open().load()).records.map((entry) => entry.key).sort()).toEqual(['ses_aaaaaaaa', 'ses_bbbbbbbb']);
    expect(readdirSync(dir).some((name) => name.endsWith('.tmp'))).toBe(false);
  });

  it('creates a first record in place, replaces one written before (by itself or a previous daemon), and clears an empty one', async () => {
    const { dir, open } = store();
    const file = path.join(dir, 'ses_aaaaaaaa.json');
    const first = open();
    await first.save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }]);
    await first.save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 200) }]);
    expect((JSON.parse(readFileSync(file, 'utf8')) as ContainerRecord).clientPid).toBe(200);
    // A daemon started later, before it loaded the records, writes the same key: the file is replaced.
    await open().save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 300) }]);
    expect((JSON.parse(readFileSync(file, 'utf8')) as ContainerRecord).clientPid).toBe(300);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // A daemon killed between creating a record and writing it leaves it empty: its plan was never handed out.
    writeFileSync(path.join(dir, 'ses_bbbbbbbb.json'), '');
    expect((await open().load()).records.map((entry) => [entry.key, entry.clientPid])).toEqual([['ses_aaaaaaaa', 300]]);
    expect(readdirSync(dir)).toEqual(['ses_aaaaaaaa.json']);
  });

  it('forgets a record by removing its file, after a write of the same key queued before', async () => {
    const { dir, open } = store();
    const subject = open();
    await Promise.all([subject.save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }]), subject.save([{ key: 'ses_aaaaaaaa', kind: 'forget' }])]);
    expect(readdirSync(dir)).toEqual([]);
    expect(await open().load()).toEqual({ records: [], released: [] });
  });

  it('moves a released record aside in one rename, loads it as released, and forgets it', async () => {
    const { dir, open } = store();
    const subject = open();
    await subject.save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }]);
    await subject.save([{ key: 'ses_aaaaaaaa', kind: 'release' }, { key: 'ses_neverwritten', kind: 'release' }]);
    expect(readdirSync(dir)).toEqual(['released']);
    expect(statSync(path.join(dir, 'released')).mode & 0o777).toBe(0o700);
    const loaded = await open().load();
    expect({ records: loaded.records, released: loaded.released.map((entry) => entry.key) }).toEqual({ records: [], released: ['ses_aaaaaaaa'] });
    await subject.save([{ key: 'ses_aaaaaaaa', kind: 'forget-released' }]);
    expect(readdirSync(path.join(dir, 'released'))).toEqual([]);
  });

  it('rejects a record it cannot write; other changes are only logged', async () => {
    const { dir, open } = store();
    // A file where the records' directory should be stands in for a state dir that refuses writes
    // (a full disk is tested end to end, on a real full filesystem).
    mkdirSync(path.dirname(dir), { recursive: true });
    writeFileSync(dir, '');
    const subject = open();
    await expect(subject.save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }])).rejects.toMatchObject({ code: 'INSECURE_DIRECTORY' });
    await expect(subject.save([{ key: 'ses_aaaaaaaa', kind: 'forget' }, { key: 'ses_bbbbbbbb', kind: 'release' }])).resolves.toBeUndefined();
  });

  it('folds in the single containers.json of an earlier release, then removes it', async () => {
    const { dir, legacy, open } = store();
    await open().save([{ key: 'ses_aaaaaaaa', kind: 'write', record: record('ses_aaaaaaaa', 100) }]);
    writeFileSync(legacy, JSON.stringify({ version: 1, containers: [record('ses_aaaaaaaa', 999), record('ses_bbbbbbbb', 1)] }));
    const loaded = await open().load();
    expect(loaded.records.map((entry) => [entry.key, entry.clientPid])).toEqual([['ses_aaaaaaaa', 100], ['ses_bbbbbbbb', 1]]);
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
