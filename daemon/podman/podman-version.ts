import { FingerprintCache } from '../cache/fingerprint-cache.js';
import type { Defer } from '../cache/quiet-time.js';
import { findExecutable } from '../os/executables.js';
import type { RunSubprocess } from '../os/subprocess.js';

/** A backstop: the binary itself is watched, so an upgrade is seen at once. */
const VERSION_TTL_MS = 10 * 60_000;
const VERSION_TIMEOUT_MS = 5_000;

interface Answer {
  binary: string | null;
  /** `podman version 4.3.1` as printed, or null when it printed nothing that says. */
  version: string | null;
}

/**
 * `podman --version` of the podman on a session's PATH (it reads no storage, so it is quick), kept
 * while that binary is unchanged: whether `--userns=keep-id:uid=` exists depends on it.
 */
export function createPodmanVersions(deps: { run: RunSubprocess; home: string; now(): number; defer?: Defer }): (searchPath: string) => Promise<string | null> {
  const cache = new FingerprintCache<string, Answer>({
    key: (searchPath) => searchPath,
    watched: (_searchPath, answer) => (answer.binary === null ? [] : [answer.binary]),
    now: () => deps.now(),
    ttlMs: VERSION_TTL_MS,
    defer: deps.defer,
    compute: async (searchPath) => {
      const binary = await findExecutable('podman', searchPath);
      if (binary === null) return { binary, version: null };
      const result = await deps.run(binary, ['--version'], { env: { PATH: searchPath, HOME: deps.home }, timeoutMs: VERSION_TIMEOUT_MS });
      const line = result.stdout.trim().split('\n')[0] ?? '';
      return { binary, version: result.exitCode === 0 && /version \d/.test(line) ? line : null };
    },
  });
  return async (searchPath) => (await cache.get(searchPath)).version;
}
