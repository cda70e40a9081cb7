import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { createDiscoveryCache, perAcquire } from '../../daemon/podman/discovery-cache.js';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import { FingerprintCache } from '../../daemon/cache/fingerprint-cache.js';
import type { DiscoverInput } from '../../daemon/podman/discover.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Stands in for running `podman system connection list`: counts the runs. */
function setup() {
  const dir = mkdtempSync('/tmp/sbx-dc-');
  dirs.push(dir);
  const conf = path.join(dir, 'containers.conf');
  const connectionsConf = path.join(dir, 'podman-connections.json');
  writeFileSync(conf, 'a');
  writeFileSync(connectionsConf, '{}');
  let now = 0;
  let runs = 0;
  const connection: PodmanConnection = { name: 'm', uri: 'ssh://h/x', identity: null, isDefault: true, isMachine: false, target: parseSshUri('ssh://h/x', 'm') };
  const cache = createDiscoveryCache(
    () => {
      runs += 1;
      return Promise.resolve(connection);
    },
    { home: dir, now: () => now, ttlMs: 10_000 },
  );
  const input: DiscoverInput = { path: '/usr/bin', env: { CONTAINERS_CONF: conf, PODMAN_CONNECTIONS_CONF: connectionsConf } };
  return { cache, input, conf, connectionsConf, runs: () => runs, advance: (ms: number) => (now += ms) };
}

const acquireBase: AcquireInput = {
  engine: 'podman',
  client: { pid: 4242, cwd: '/work' },
  sshAgent: 'auto',
  sshBridge: 'tunnel',
  workdir: false,
  allowWideWorkdir: false,
  mounts: [],
  cloudCredentials: false,
  passEnv: {},
  gitHooks: 'readonly',
  gitConfig: 'readonly',
  allowUnprotectedGitPaths: false,
  sockets: [],
  harden: false,
};

/** A file system in memory: each file's fingerprint is its version, bumped by `touch`. */
function fakeFiles() {
  const versions = new Map<string, number>();
  return {
    touch: (file: string) => versions.set(file, (versions.get(file) ?? 0) + 1),
    fingerprint: (files: readonly string[]) => Promise.resolve(files.map((file) => `${file}@${String(versions.get(file) ?? 0)}`).join('|')),
  };
}

describe('Podman discovery cache', () => {
  it('asks podman once for the same session view, and in the background past the TTL', async () => {
    const { cache, input, runs, advance } = setup();
    await Promise.all([cache.get(input), cache.get(input), cache.get(input)]);
    expect(runs()).toBe(1);
    await cache.get({ ...input, requested: 'other' });
    expect(runs()).toBe(2);
    // The first answer's files were not stamped before it was computed; the second one's were.
    await cache.get(input);
    expect(runs()).toBe(3);
    advance(10_001);
    vi.useFakeTimers({ toFake: ['setTimeout'] });
    try {
      await cache.get(input);
      // Started later: the session that found the answer old has been answered by then.
      expect(runs()).toBe(3);
      vi.advanceTimersByTime(1_000);
      await vi.waitFor(() => {
        expect(runs()).toBe(4);
      });
    } finally {
      vi.useRealTimers();
    }
  });

  it('asks again when CONTAINERS_CONF or PODMAN_CONNECTIONS_CONF changes, or after forget()', async () => {
    const { cache, input, conf, connectionsConf, runs } = setup();
    // The first answer's files were not stamped before it was computed; the second one's were.
    await cache.get(input);
    await cache.get(input);
    await cache.get(input);
    expect(runs()).toBe(2);
    // Sizes change, so the fingerprints differ whatever the file system's mtime granularity.
    writeFileSync(conf, 'bb');
    await cache.get(input);
    await cache.get(input);
    expect(runs()).toBe(3);
    writeFileSync(connectionsConf, '{"Connection":{}}');
    await cache.get(input);
    await cache.get(input);
    expect(runs()).toBe(4);
    cache.forget(input);
    await cache.get(input);
    expect(runs()).toBe(5);
  });
});

describe('Podman discovery per acquire', () => {
  it('looks the connection up once for an acquire, whoever asks, and again once forgotten', async () => {
    const { cache, input, runs } = setup();
    const discovery = perAcquire(cache);
    const acquire = (): AcquireInput => ({ ...acquireBase, client: { ...acquireBase.client, path: input.path, env: input.env } });
    const first = acquire();
    // Its site and its tunnel ask at different moments; both get the same answer.
    const site = await discovery.connectionFor(first);
    const tunnel = await discovery.connectionFor(first);
    expect(tunnel).toBe(site);
    expect(runs()).toBe(1);
    // A tunnel that lost its connection forgets it: the next lookup asks podman again.
    discovery.forget(first);
    await discovery.connectionFor(first);
    expect(runs()).toBe(2);
    // Another acquire of the same view is answered by the cache (stamped by now), not by podman.
    await discovery.connectionFor(acquire());
    expect(runs()).toBe(2);
  });

  it("serves an extra socket's tunnel, given a copy of the request, from the acquire's lookup", async () => {
    const { cache, input } = setup();
    let lookups = 0;
    const discovery = perAcquire({
      get: (view) => {
        lookups += 1;
        return cache.get(view);
      },
      forget: (view) => {
        cache.forget(view);
      },
    });
    const request: AcquireInput = { ...acquireBase, client: { ...acquireBase.client, path: input.path, env: input.env } };
    const agent = await discovery.connectionFor(request);
    expect(await discovery.connectionFor({ ...request, sshBridge: 'auto' })).toBe(agent);
    expect(lookups).toBe(1);
  });
});

describe('FingerprintCache', () => {
  it('never serves as fresh an answer computed while one of its files changed', async () => {
    const files = fakeFiles();
    let runs = 0;
    let editDuringCompute = false;
    const cache = new FingerprintCache<string, number>({
      compute: () => {
        runs += 1;
        const answer = runs;
        // The file is read (the answer fixed) first; an edit lands before the computation returns.
        if (editDuringCompute) files.touch('/conf');
        return Promise.resolve(answer);
      },
      key: (input) => input,
      watched: () => ['/conf'],
      now: () => 0,
      ttlMs: 60_000,
      fingerprint: files.fingerprint,
    });
    await cache.get('k');
    expect(await cache.get('k')).toBe(2);
    expect(await cache.get('k')).toBe(2);
    files.touch('/conf');
    editDuringCompute = true;
    expect(await cache.get('k')).toBe(3);
    editDuringCompute = false;
    // Answer 3 predates the edit made while it was computed: it must not be reused.
    expect(await cache.get('k')).toBe(4);
    expect(await cache.get('k')).toBe(4);
  });

  it('shares one computation among concurrent callers, watches the files an answer names, and never caches a failure', async () => {
    const files = fakeFiles();
    let runs = 0;
    let fail = false;
    let named = ['/included.conf'];
    const cache = new FingerprintCache<string, string[]>({
      compute: () => {
        runs += 1;
        return fail ? Promise.reject(new Error('boom')) : Promise.resolve(named);
      },
      key: (input) => input,
      watched: (_input, answer) => answer,
      now: () => 0,
      ttlMs: 60_000,
      fingerprint: files.fingerprint,
    });
    await Promise.all([cache.get('k'), cache.get('k')]);
    expect(runs).toBe(1);
    await cache.get('k');
    await cache.get('k');
    expect(runs).toBe(2);
    files.touch('/included.conf');
    await cache.get('k');
    expect(runs).toBe(3);
    // An answer naming a file not stamped in advance is served once, then computed again.
    named = ['/included.conf', '/new.conf'];
    cache.forget('k');
    await cache.get('k');
    await cache.get('k');
    await cache.get('k');
    expect(runs).toBe(5);
    fail = true;
    cache.forget('k');
    await expect(cache.get('k')).rejects.toThrow('boom');
    fail = false;
    await cache.get('k');
    expect(runs).toBe(7);
  });

  it('looks at the files once for callers that arrive together, and computes once when they changed', async () => {
    const files = fakeFiles();
    let looks = 0;
    let runs = 0;
    const cache = new FingerprintCache<string, number>({
      compute: () => Promise.resolve((runs += 1)),
      key: (input) => input,
      watched: () => ['/conf'],
      now: () => 0,
      ttlMs: 60_000,
      fingerprint: (watched) => {
        looks += 1;
        return files.fingerprint(watched);
      },
    });
    await cache.get('k');
    await cache.get('k');
    expect(runs).toBe(2);
    looks = 0;
    expect(await Promise.all([cache.get('k'), cache.get('k'), cache.get('k')])).toEqual([2, 2, 2]);
    expect(looks).toBe(1);
    files.touch('/conf');
    looks = 0;
    expect(await Promise.all([cache.get('k'), cache.get('k'), cache.get('k')])).toEqual([3, 3, 3]);
    expect(runs).toBe(3);
    // One look at the stale stamp, one stamp taken before computing again.
    expect(looks).toBe(2);
    // The next caller checks the files again: a shared look never outlives the callers that waited for it.
    looks = 0;
    expect(await cache.get('k')).toBe(3);
    expect(looks).toBe(1);
  });

  it('past the TTL, answers from the unchanged answer while the next is computed, and drops it when that fails', async () => {
    const files = fakeFiles();
    let now = 0;
    let runs = 0;
    const finish: ((answer: number | Error) => void)[] = [];
    const cache = new FingerprintCache<string, number>({
      compute: () => {
        runs += 1;
        return new Promise<number>((resolve, reject) => {
          finish.push((answer) => {
            if (answer instanceof Error) reject(answer);
            else resolve(answer);
          });
        });
      },
      key: (input) => input,
      watched: () => ['/conf'],
      now: () => now,
      ttlMs: 10_000,
      fingerprint: files.fingerprint,
      defer: (work) => {
        work();
      },
    });
    /** Ends the computation under way, once it has begun (after the files are stamped). */
    const settle = async (answer: number | Error): Promise<void> => {
      await vi.waitFor(() => {
        expect(finish.length).toBeGreaterThan(0);
      });
      finish.shift()?.(answer);
      await new Promise((resolve) => setImmediate(resolve));
    };
    const first = cache.get('k');
    await settle(1);
    expect(await first).toBe(1);
    const second = cache.get('k');
    await settle(2);
    expect(await second).toBe(2);
    now += 10_001;
    // Older than the TTL with its file unchanged: served at once, the next one computed meanwhile.
    expect(await cache.get('k')).toBe(2);
    expect(await cache.get('k')).toBe(2);
    expect(runs).toBe(3);
    await settle(3);
    expect(await cache.get('k')).toBe(3);
    expect(runs).toBe(3);
    // A changed file is never answered from the old answer, TTL or not.
    files.touch('/conf');
    const changed = cache.get('k');
    await settle(4);
    expect(await changed).toBe(4);
    // A recomputation that fails drops the old answer: the next caller computes and sees the failure.
    now += 10_001;
    expect(await cache.get('k')).toBe(4);
    await settle(new Error('podman broke'));
    const failing = expect(cache.get('k')).rejects.toThrow('podman broke');
    await settle(new Error('podman broke'));
    await failing;
    expect(runs).toBe(6);
  });

  it('looks at the answer a refresh put in place while a caller was checking, instead of computing again', async () => {
    const files = fakeFiles();
    let now = 0;
    let runs = 0;
    let releaseCheck = null as (() => void) | null;
    let holdChecks = false;
    const cache = new FingerprintCache<string, number>({
      compute: () => Promise.resolve((runs += 1)),
      key: (input) => input,
      watched: () => ['/conf'],
      now: () => now,
      ttlMs: 10_000,
      fingerprint: async (watched) => {
        if (holdChecks) await new Promise<void>((resolve) => (releaseCheck = resolve));
        return files.fingerprint(watched);
      },
      defer: (work) => {
        work();
      },
    });
    await cache.get('k');
    await cache.get('k');
    now += 10_001;
    // This caller finds the answer old and sets the refresh off; it lands while the next caller checks.
    expect(await cache.get('k')).toBe(2);
    holdChecks = true;
    const checking = cache.get('k');
    await vi.waitFor(() => {
      expect(releaseCheck).not.toBeNull();
    });
    holdChecks = false;
    await vi.waitFor(() => {
      expect(runs).toBe(3);
    });
    releaseCheck?.();
    expect(await checking).toBe(3);
    expect(runs).toBe(3);
  });
});
