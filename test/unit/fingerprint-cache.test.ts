import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { createDiscoveryCache } from '../../daemon/podman/discovery-cache.js';
import { FingerprintCache } from '../../daemon/fingerprint-cache.js';
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
  writeFileSync(conf, 'a');
  let now = 0;
  let runs = 0;
  const connection: PodmanConnection = { name: 'm', uri: 'ssh://h/x', identity: null, isDefault: true, target: parseSshUri('ssh://h/x', 'm') };
  const cache = createDiscoveryCache(
    () => {
      runs += 1;
      return Promise.resolve(connection);
    },
    { home: dir, now: () => now, ttlMs: 10_000 },
  );
  const input: DiscoverInput = { path: '/usr/bin', env: { CONTAINERS_CONF: conf } };
  return { cache, input, conf, runs: () => runs, advance: (ms: number) => (now += ms) };
}

describe('Podman discovery cache', () => {
  it('asks podman once for the same session view and again after the TTL', async () => {
    const { cache, input, runs, advance } = setup();
    await Promise.all([cache.get(input), cache.get(input), cache.get(input)]);
    expect(runs()).toBe(1);
    await cache.get({ ...input, requested: 'other' });
    expect(runs()).toBe(2);
    advance(10_001);
    await cache.get(input);
    expect(runs()).toBe(3);
  });

  it('asks again when a connection file changes or after forget()', async () => {
    const { cache, input, conf, runs } = setup();
    await cache.get(input);
    utimesSync(conf, new Date(), new Date(Date.now() + 5_000));
    await cache.get(input);
    expect(runs()).toBe(2);
    cache.forget(input);
    await cache.get(input);
    expect(runs()).toBe(3);
  });
});

describe('FingerprintCache', () => {
  it('watches the files an answer names itself, and never caches a failure', async () => {
    const dir = mkdtempSync('/tmp/sbx-fc-');
    dirs.push(dir);
    const named = path.join(dir, 'included.conf');
    writeFileSync(named, 'a');
    let runs = 0;
    let fail = false;
    const cache = new FingerprintCache<string, string[]>({
      compute: () => {
        runs += 1;
        return fail ? Promise.reject(new Error('boom')) : Promise.resolve([named]);
      },
      key: (input) => input,
      watched: (_input, files) => files,
      now: () => 0,
      ttlMs: 60_000,
    });
    await cache.get('k');
    await cache.get('k');
    expect(runs).toBe(1);
    writeFileSync(named, 'longer');
    await cache.get('k');
    expect(runs).toBe(2);
    fail = true;
    cache.forget('k');
    await expect(cache.get('k')).rejects.toThrow('boom');
    fail = false;
    await cache.get('k');
    expect(runs).toBe(4);
  });
});
