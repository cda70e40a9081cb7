import { promises as fs } from 'node:fs';
import { SandboxdError } from '../shared/errors.js';

/** A holder refreshes the lock this often; one left untouched for STALE_MS died holding it. */
const REFRESH_MS = 5_000;
const STALE_MS = 10_000;
const RETRY_MS = 100;

export interface LockClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const REAL_CLOCK: LockClock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException).code;
}

/** Whether the lock was last touched more than STALE_MS ago (a lock gone meanwhile is not stale: retry). */
async function isStale(lockPath: string, clock: LockClock): Promise<boolean> {
  try {
    return clock.now() - (await fs.stat(lockPath)).mtimeMs > STALE_MS;
  } catch {
    return false;
  }
}

/**
 * Serialises daemon spawns among clients: the lock is a directory (mkdir is atomic), the shape
 * proper-lockfile gives it, so clients of older releases exclude these and the other way round;
 * written here so the client library carries no CommonJS dependency (an ESM bundle has no
 * `require` for one). The holder touches it every REFRESH_MS; a lock untouched for STALE_MS is a
 * dead client's and is taken over. Two clients taking over one stale lock at once may both spawn:
 * the daemon's own instance lock then lets one run. Resolves to the release.
 */
export async function acquireSpawnLock(lockPath: string, timeoutMs: number, clock: LockClock = REAL_CLOCK): Promise<() => Promise<void>> {
  const deadline = clock.now() + timeoutMs;
  for (;;) {
    try {
      await fs.mkdir(lockPath, { mode: 0o700 });
      break;
    } catch (error) {
      if (errorCode(error) !== 'EEXIST') {
        throw new SandboxdError('DAEMON_START_FAILED', `cannot take the start lock ${lockPath}: ${(error as Error).message}`, { cause: error });
      }
    }
    if (clock.now() >= deadline) {
      throw new SandboxdError('DAEMON_START_FAILED', `another client held the start lock ${lockPath} for over ${timeoutMs} ms`, {
        remedy: 'Run `sandboxd status`; if no daemon answers, run `sandboxd daemon` in a terminal to see why.',
      });
    }
    if (await isStale(lockPath, clock)) await fs.rmdir(lockPath).catch(() => undefined);
    else await clock.sleep(RETRY_MS);
  }
  const touch = setInterval(() => {
    const time = new Date();
    fs.utimes(lockPath, time, time).catch(() => undefined);
  }, REFRESH_MS);
  touch.unref();
  return async () => {
    clearInterval(touch);
    await fs.rmdir(lockPath).catch(() => undefined);
  };
}
