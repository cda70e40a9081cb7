import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { DiscoveryCache } from '../../daemon/podman/discovery-cache.js';
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
  const cache = new DiscoveryCache(
    () => {
      runs += 1;
      return Promise.resolve(connection);
    },
    { home: dir, now: () => now, ttlMs: 10_000 },
  );
  const input: DiscoverInput = { path: '/usr/bin', env: { CONTAINERS_CONF: conf } };
  return { cache, input, conf, runs: () => runs, advance: (ms: number) => (now += ms) };
}

describe('DiscoveryCache', () => {
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
