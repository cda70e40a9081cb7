import path from 'node:path';
import { FingerprintCache } from '../fingerprint-cache.js';
import type { PodmanConnection } from './connections.js';
import type { DiscoverInput } from './discover.js';

/** A backstop for config podman reads that the watched files do not cover (e.g. *.conf.d). */
export const DISCOVERY_TTL_MS = 10_000;

/** The files podman reads its connections from, for the session's environment. */
export function connectionFiles(input: DiscoverInput, home: string): string[] {
  const configHome = input.env.XDG_CONFIG_HOME ?? path.join(home, '.config');
  return [
    ...(input.env.CONTAINERS_CONF === undefined ? [] : [input.env.CONTAINERS_CONF]),
    ...(input.env.PODMAN_CONNECTIONS_CONF === undefined ? [] : [input.env.PODMAN_CONNECTIONS_CONF]),
    path.join(configHome, 'containers', 'containers.conf'),
    path.join(configHome, 'containers', 'podman-connections.json'),
    '/etc/containers/containers.conf',
  ];
}

/**
 * Running podman costs ~20 ms, far above a warm acquire's budget (issue 3: p99 ≤ 5 ms); answers
 * are shared per session view (PATH, podman variables, requested name).
 */
export function createDiscoveryCache(
  discover: (input: DiscoverInput) => Promise<PodmanConnection>,
  options: { home: string; now: () => number; ttlMs?: number },
): FingerprintCache<DiscoverInput, PodmanConnection> {
  return new FingerprintCache({
    compute: discover,
    key: (input) => JSON.stringify([input.path, input.env, input.requested ?? null]),
    watched: (input) => connectionFiles(input, options.home),
    now: options.now,
    ttlMs: options.ttlMs ?? DISCOVERY_TTL_MS,
  });
}
