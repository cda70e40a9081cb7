import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { DiscoverInput } from './discover.js';
import type { PodmanConnection } from './connections.js';

/** A backstop for config podman reads that the fingerprint does not watch (e.g. *.conf.d). */
export const DISCOVERY_TTL_MS = 10_000;

interface Entry {
  at: number;
  fingerprint: string;
  result: Promise<PodmanConnection>;
}

/** The files podman reads its connections from, for the session's environment. */
export function connectionFiles(input: DiscoverInput, home: string): string[] {
  const configHome = input.env.XDG_CONFIG_HOME ?? path.join(home, '.config');
  return [
    ...(input.env.CONTAINERS_CONF === undefined ? [] : [input.env.CONTAINERS_CONF]),
    path.join(configHome, 'containers', 'containers.conf'),
    path.join(configHome, 'containers', 'podman-connections.json'),
    '/etc/containers/containers.conf',
  ];
}

async function fingerprintOf(files: readonly string[]): Promise<string> {
  const stamps = await Promise.all(
    files.map(async (file) => {
      try {
        const stat = await fs.stat(file);
        return `${file}:${stat.mtimeMs}:${stat.size}`;
      } catch {
        return `${file}:-`;
      }
    }),
  );
  return stamps.join('|');
}

/**
 * Running podman costs ~20 ms, far above a warm acquire's budget (issue 3: p99 ≤ 5 ms). Results
 * are shared per session view (PATH, podman variables, requested name), single-flight, and
 * dropped when a connection file changes, after the TTL, or when a tunnel over it failed.
 */
export class DiscoveryCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly discover: (input: DiscoverInput) => Promise<PodmanConnection>,
    private readonly options: { home: string; now(): number; ttlMs?: number },
  ) {}

  async get(input: DiscoverInput): Promise<PodmanConnection> {
    const key = JSON.stringify([input.path, input.env, input.requested ?? null]);
    const fingerprint = await fingerprintOf(connectionFiles(input, this.options.home));
    const now = this.options.now();
    const cached = this.entries.get(key);
    if (cached !== undefined && cached.fingerprint === fingerprint && now - cached.at < (this.options.ttlMs ?? DISCOVERY_TTL_MS)) {
      return cached.result;
    }
    const result = this.discover(input);
    this.entries.set(key, { at: now, fingerprint, result });
    result.catch(() => {
      if (this.entries.get(key)?.result === result) this.entries.delete(key);
    });
    return result;
  }

  /** After a tunnel failure: the next session asks podman again. */
  forget(input: DiscoverInput): void {
    this.entries.delete(JSON.stringify([input.path, input.env, input.requested ?? null]));
  }
}
