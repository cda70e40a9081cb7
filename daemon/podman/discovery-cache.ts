import path from 'node:path';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import { FingerprintCache } from '../cache/fingerprint-cache.js';
import type { Defer } from '../cache/quiet-time.js';
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
 * Running podman costs far more than a warm acquire's whole budget (the bench's warm rows); answers
 * are shared per session view (PATH, podman variables, requested name).
 */
export function createDiscoveryCache(
  discover: (input: DiscoverInput) => Promise<PodmanConnection>,
  options: { home: string; now: () => number; ttlMs?: number; defer?: Defer },
): FingerprintCache<DiscoverInput, PodmanConnection> {
  return new FingerprintCache({
    compute: discover,
    key: (input) => JSON.stringify([input.path, input.env, input.requested ?? null]),
    watched: (input) => connectionFiles(input, options.home),
    now: options.now,
    ttlMs: options.ttlMs ?? DISCOVERY_TTL_MS,
    defer: options.defer,
  });
}

/** The part of a session that podman's connection lookup depends on. */
export function discoveryView(input: AcquireInput): DiscoverInput {
  return { path: input.client.path ?? '', env: input.client.env ?? {}, requested: input.connection };
}

export interface AcquireDiscovery {
  connectionFor(input: AcquireInput): Promise<PodmanConnection>;
  /** Drops the acquire's answer and the cached one (a tunnel that cannot reach it any more). */
  forget(input: AcquireInput): void;
}

/**
 * One lookup per acquire, shared by its site and its tunnels (the agent's and each extra
 * socket's): all must name the same connection, and each lookup checks the files podman reads
 * (five stats on a warm acquire). Keyed by the request's client context, which the copies of
 * the input a socket's tunnel gets (another bridge setting) share.
 */
export function perAcquire(cache: Pick<FingerprintCache<DiscoverInput, PodmanConnection>, 'get' | 'forget'>): AcquireDiscovery {
  const answers = new WeakMap<AcquireInput['client'], Promise<PodmanConnection>>();
  return {
    connectionFor(input) {
      let answer = answers.get(input.client);
      if (answer === undefined) {
        answer = cache.get(discoveryView(input));
        answers.set(input.client, answer);
      }
      return answer;
    },
    forget(input) {
      answers.delete(input.client);
      cache.forget(discoveryView(input));
    },
  };
}
