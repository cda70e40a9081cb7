import { describe, expect, it, vi } from 'vitest';
import { interpretProbe, probeArgs, probeBuiltinSocket } from '../../daemon/engines/builtin-probe.js';
import { ProbeCache } from '../../daemon/engines/probe-cache.js';
import type { RunSubprocess, SubprocessResult } from '../../daemon/os/subprocess.js';

const SOCKET = '/run/host-services/ssh-auth.sock';
const result = (exitCode: number | null, stdout = '', stderr = ''): SubprocessResult => ({ exitCode, stdout, stderr });

const HELPER = { entrypoint: '/sandboxd-relay', labels: ['--label', 'sandboxd.owner=o', '--label', 'sandboxd.helper=probe'] };
/** An ed25519 key blob as an agent returns it (`ssh-add -l` shows it as the fingerprint below). */
const BLOB = Buffer.from('0000000b7373682d6564323535313900000020c365fa6c2651fb4687d895421cacca8ae8f066e1158ef6e16ec8639e87d6d254', 'hex');

describe('the built-in socket probe (`docker run … sandboxd-relay identities` in sandboxd\'s own image)', () => {
  it('runs sandboxd\'s image, never the session\'s: no network, capabilities or pull, bounded, labelled, with the socket read-only and nothing else', () => {
    expect(probeArgs('p1', SOCKET, 'sandboxd-relay:abc', HELPER)).toEqual([
      'run', '--rm', '--name', 'p1', '--pull', 'never', '--network', 'none', '--cap-drop', 'ALL', '--read-only',
      '--security-opt', 'no-new-privileges', '--pids-limit', '4', '--memory', '16m', '--user', '0:0', '--label', 'sandboxd.owner=o', '--label', 'sandboxd.helper=probe',
      '--mount', `type=bind,source=${SOCKET},target=/run/sandboxd/probe.sock,readonly`,
      '--entrypoint', '/sandboxd-relay', 'sandboxd-relay:abc', 'identities', '/run/sandboxd/probe.sock',
    ]);
  });

  it('asks as another user when told to', () => {
    expect(probeArgs('p1', SOCKET, 'sandboxd-relay:abc', HELPER, { uid: 501, gid: 1000 })).toContain('501:1000');
  });

  it.each([
    ['keys listed', result(0, `key ${BLOB.toString('hex')}\nidentities 1`), { state: 'verified', keys: ['SHA256:KYrfQnF6IW6QnO9SsQpMANypp+n1so9l/1FMNfdbmWs'], detail: `the agent at ${SOCKET} lists 1 key(s)` }],
    ['no keys', result(0, 'identities 0'), { state: 'verified', keys: [], detail: `the agent at ${SOCKET} holds no keys` }],
    ['no socket in the VM', result(125, '', `docker: Error response from daemon: invalid mount config for type "bind": bind source path does not exist: ${SOCKET}`), { state: 'missing', detail: `the engine's VM has no ${SOCKET}` }],
    ['nothing answers', result(2, '', `sandboxd-relay: connect /run/sandboxd/probe.sock: Connection refused`), { state: 'unusable', detail: `nothing answers on ${SOCKET} in the engine's VM: sandboxd-relay: connect /run/sandboxd/probe.sock: Connection refused` }],
    ['not an agent', result(3, '', 'sandboxd-relay: /run/sandboxd/probe.sock did not answer as an ssh agent'), { state: 'unusable' }],
    ['the agent does not answer', result(4, '', 'sandboxd-relay: the agent did not answer in time'), { state: 'unverified', detail: `the agent at ${SOCKET} did not answer within 5 s` }],
    ['the image is gone', result(125, '', 'docker: Error response from daemon: No such image: sandboxd-relay:abc.'), { state: 'unverified', detail: `the probe of ${SOCKET} failed: docker: Error response from daemon: No such image: sandboxd-relay:abc.` }],
    // The docker CLI's own trailer follows the cause; the cause is what the warning names.
    ['the engine refuses the run', result(125, '', "docker: Error response from daemon: failed to create task for container: unexpected EOF\n\nRun 'docker run --help' for more information\n"), { state: 'unverified', detail: `the probe of ${SOCKET} failed: docker: Error response from daemon: failed to create task for container: unexpected EOF` }],
    ['cut off', result(null, '', 'Command failed'), { state: 'unverified', detail: `the probe of ${SOCKET} did not finish within 8000 ms and was cut off` }],
    // A permission failure is named as one, never as a socket nothing answers on.
    [
      'permission denied, with the owner',
      result(5, 'owner 501 1000 0600\n', 'sandboxd-relay: connect /run/sandboxd/probe.sock: Permission denied'),
      { state: 'denied', detail: `permission denied: root without capabilities may not connect to ${SOCKET} in the engine's VM (owner uid 501, gid 1000, mode 0600)`, user: { uid: 0, gid: 0 } },
    ],
    ['permission denied, owner unknown', result(5, '', 'sandboxd-relay: connect /run/sandboxd/probe.sock: Permission denied'), { state: 'denied', detail: `permission denied: root without capabilities may not connect to ${SOCKET} in the engine's VM` }],
  ])('%s', (_name, outcome, expected) => {
    expect(interpretProbe(outcome, SOCKET, 8000)).toMatchObject(expected);
  });

  /**
   * Colima's socket (see docker-bridges.test.ts for the upstream sources): lima's link to sshd's
   * forwarded socket, the VM user's (uid 501 by default: lima takes the Mac user's uid), 0755
   * before OpenSSH 10.1 and 0600 from it. `docker run --mount` follows the link, so the relay's
   * stat in the probe container is the target's.
   */
  function colimaVm(mode: '0600' | '0755', ownerMay = true) {
    const users: string[] = [];
    const run: RunSubprocess = (_file, args) => {
      const user = args[args.indexOf('--user') + 1] ?? '';
      users.push(user);
      if (user === '501:1000' && ownerMay) return Promise.resolve(result(0, `key ${BLOB.toString('hex')}\nidentities 1\n`));
      return Promise.resolve(result(5, `owner 501 1000 ${mode}\n`, 'sandboxd-relay: connect /run/sandboxd/probe.sock: Permission denied\n'));
    };
    const image = { ...HELPER, tag: () => Promise.resolve('sandboxd-relay:abc') };
    return { users, probe: () => probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image }) };
  }

  it.each(['0600', '0755'] as const)('a socket of the VM\'s user (%s, Colima) is asked again as its owner, who may connect: verified, as that user', async (mode) => {
    const vm = colimaVm(mode);
    expect(await vm.probe()).toEqual({ state: 'verified', detail: `the agent at ${SOCKET} lists 1 key(s)`, keys: ['SHA256:KYrfQnF6IW6QnO9SsQpMANypp+n1so9l/1FMNfdbmWs'], user: { uid: 501, gid: 1000 } });
    expect(vm.users).toEqual(['0:0', '501:1000']);
  });

  it('a socket its owner may not reach either (a security module, a remapped engine) is denied, naming who tried', async () => {
    const vm = colimaVm('0600', false);
    expect(await vm.probe()).toMatchObject({ state: 'denied', detail: `permission denied: its owner (uid 501) may not connect to ${SOCKET} in the engine's VM (owner uid 501, gid 1000, mode 0600)`, user: { uid: 501, gid: 1000 } });
    expect(vm.users).toEqual(['0:0', '501:1000']);
  });

  it('root\'s own socket that root may not reach is not asked again', async () => {
    const users: string[] = [];
    const run: RunSubprocess = (_file, args) => {
      users.push(args[args.indexOf('--user') + 1] ?? '');
      return Promise.resolve(result(5, 'owner 0 0 0600\n', 'sandboxd-relay: connect /run/sandboxd/probe.sock: Permission denied'));
    };
    const image = { ...HELPER, tag: () => Promise.resolve('sandboxd-relay:abc') };
    expect((await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image })).state).toBe('denied');
    expect(users).toEqual(['0:0']);
  });

  it("the engine's runtime failing to start the probe's container is asked again, three times in all, then believed", async () => {
    // Stands in for dockerd under load: runc raced on the start (seen on a real dockerd 20.10 here).
    const hiccup = result(125, '', 'docker: Error response from daemon: OCI runtime start failed: cannot start an already running container: unknown.');
    const answers = [hiccup, result(0, `key ${BLOB.toString('hex')}\nidentities 1\n`)];
    const names: string[] = [];
    const run: RunSubprocess = (_file, args) => {
      names.push(args[3] ?? '');
      return Promise.resolve(answers.shift() ?? hiccup);
    };
    const image = { ...HELPER, tag: () => Promise.resolve('sandboxd-relay:abc') };
    expect((await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image })).state).toBe('verified');
    expect(new Set(names).size).toBe(2);
    answers.push(hiccup, hiccup, result(0, `key ${BLOB.toString('hex')}\nidentities 1\n`));
    expect((await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image })).state).toBe('verified');
    expect(names).toHaveLength(5);
    // containerd's words for a task gone before its start (seen on the same dockerd under load).
    const stopped = result(125, '', 'docker: Error response from daemon: cannot start a stopped process: unknown.');
    answers.push(stopped, hiccup, result(0, `key ${BLOB.toString('hex')}\nidentities 1\n`));
    expect((await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image })).state).toBe('verified');
    names.splice(0);
    answers.push(hiccup, hiccup, hiccup, result(0, `key ${BLOB.toString('hex')}\nidentities 1\n`));
    const thrice = await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image });
    expect(thrice.state).toBe('unverified');
    expect(thrice.detail).toContain('cannot start an already running container');
    expect(names).toHaveLength(3);
  });

  it('a probe that hangs is cut off by removing its container', async () => {
    const calls: string[][] = [];
    let removed: (() => void) | null = null;
    // Stands in for runSubprocess running the docker CLI: `run` hangs until its container is removed.
    const run: RunSubprocess = (_file, args) => {
      calls.push([...args]);
      if (args[0] === 'run') return new Promise((resolve) => (removed = () => { resolve(result(137, '', '')); }));
      removed?.();
      return Promise.resolve(result(0));
    };
    const image = { ...HELPER, tag: () => Promise.resolve('sandboxd-relay:abc') };
    const outcome = await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image, timeoutMs: 20 });
    expect(outcome).toEqual({ state: 'unverified', detail: `the probe of ${SOCKET} did not finish within 20 ms and was cut off`, keys: [], user: { uid: 0, gid: 0 } });
    const name = calls[0]?.[3] ?? '';
    expect(name).toMatch(/^sandboxd-probe_/);
    expect(calls[1]).toEqual(['rm', '-f', name]);
  });

  it('without sandboxd\'s image (no relay for the architecture) the socket is unverified, and nothing runs', async () => {
    const run: RunSubprocess = () => Promise.reject(new Error('docker must not run'));
    const image = { ...HELPER, tag: () => Promise.reject(new Error('no agent relay built for s390x')) };
    expect(await probeBuiltinSocket(SOCKET, { run, docker: '/usr/bin/docker', env: {}, image })).toEqual({ state: 'unverified', detail: `sandboxd cannot probe ${SOCKET}: no agent relay built for s390x`, keys: [], user: { uid: 0, gid: 0 } });
  });
});

describe('ProbeCache: one probe per engine instance', () => {
  function setup() {
    let now = 0;
    let probes = 0;
    let finish = null as (() => void) | null;
    const cache = new ProbeCache({
      now: () => now,
      wall: () => 0,
      ttlMs: 1000,
      retryMs: 100,
      defer: (work) => {
        work();
      },
    });
    const probe = (state: 'verified' | 'unverified' = 'verified') => () => {
      probes += 1;
      return new Promise<{ state: typeof state; detail: string; keys: string[]; user: { uid: number; gid: number } }>((resolve) => {
        finish = () => {
          resolve({ state, detail: 'd', keys: [], user: { uid: 0, gid: 0 } });
        };
      });
    };
    return { cache, probe, probes: () => probes, finish: () => finish?.(), advance: (ms: number) => (now += ms) };
  }

  it('20 concurrent sessions share one probe; past the TTL the answer serves while the next probe runs', async () => {
    const t = setup();
    const pending = Array.from({ length: 20 }, () => t.cache.get('eng_a', 'img', t.probe()));
    t.finish();
    const records = await Promise.all(pending);
    expect(t.probes()).toBe(1);
    expect(new Set(records).size).toBe(1);
    t.advance(999);
    await t.cache.get('eng_a', 'other-img', t.probe());
    expect(t.probes()).toBe(1);
    t.advance(1);
    // The sessions that find it old are answered at once; one probe runs for the ones after them.
    expect(await t.cache.get('eng_a', 'img', t.probe())).toBe(records[0]);
    expect(await t.cache.get('eng_a', 'img', t.probe())).toBe(records[0]);
    expect(t.probes()).toBe(2);
    t.finish();
    await vi.waitFor(() => {
      expect(t.cache.latest('eng_a')).not.toBe(records[0]);
    });
    expect(await t.cache.get('eng_a', 'img', t.probe())).toBe(t.cache.latest('eng_a'));
    expect(t.probes()).toBe(2);
  });

  it('schedules one background probe however many sessions find the answer old, and stores nothing for an engine forgotten meanwhile', async () => {
    let now = 0;
    const waiting: (() => void)[] = [];
    const cache = new ProbeCache({
      now: () => now,
      wall: () => 0,
      ttlMs: 1000,
      defer: (work) => {
        waiting.push(work);
      },
    });
    let probes = 0;
    let finish = null as (() => void) | null;
    const probe = () => {
      probes += 1;
      return new Promise<{ state: 'verified'; detail: string; keys: string[]; user: { uid: number; gid: number } }>((resolve) => {
        finish = () => {
          resolve({ state: 'verified', detail: 'd', keys: [], user: { uid: 0, gid: 0 } });
        };
      });
    };
    const first = cache.get('eng_a', 'img', probe);
    finish?.();
    await first;
    now += 1000;
    for (let session = 0; session < 5; session += 1) await cache.get('eng_a', 'img', probe);
    expect(waiting).toHaveLength(1);
    waiting.shift()?.();
    expect(probes).toBe(2);
    // The engine restarted (a new instance) while the old one's probe ran: its answer is not kept.
    cache.forget('eng_a');
    finish?.();
    await new Promise((resolve) => setImmediate(resolve));
    expect(cache.latest('eng_a')).toBeNull();
  });

  it('a probe that fails drops the answer: the next session probes again', async () => {
    const t = setup();
    const first = t.cache.get('eng_a', 'img', t.probe());
    t.finish();
    await first;
    t.advance(1000);
    const failing = () => Promise.reject(new Error('docker is gone'));
    expect((await t.cache.get('eng_a', 'img', failing)).state).toBe('verified');
    await vi.waitFor(() => {
      expect(t.cache.latest('eng_a')).toBeNull();
    });
    await expect(t.cache.get('eng_a', 'img', failing)).rejects.toThrow('docker is gone');
  });

  it('a restarted engine is a new instance and gets one more probe', async () => {
    const t = setup();
    const first = t.cache.get('eng_a', 'img', t.probe());
    t.finish();
    await first;
    const second = t.cache.get('eng_b', 'img', t.probe());
    t.finish();
    await second;
    await t.cache.get('eng_b', 'img', t.probe());
    expect(t.probes()).toBe(2);
    expect(t.cache.latest('eng_b')?.state).toBe('verified');
  });

  it('a probe that could not tell is retried sooner, and at once with another image', async () => {
    const t = setup();
    const first = t.cache.get('eng_a', 'img', t.probe('unverified'));
    t.finish();
    await first;
    await t.cache.get('eng_a', 'img', t.probe());
    expect(t.probes()).toBe(1);
    const other = t.cache.get('eng_a', 'img2', t.probe());
    t.finish();
    await other;
    expect(t.probes()).toBe(2);
  });
});
