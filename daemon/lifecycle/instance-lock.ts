import { promises as fs } from 'node:fs';
import lockfile from 'proper-lockfile';
import { SandboxdError } from '../../shared/errors.js';
import { readPidRecord, type ProcessProbe } from '../os/process-identity.js';
import { writeFileAtomic } from '../os/files.js';

/** proper-lockfile's staleness window: how long a holder that left no pid record keeps the lock. */
export const LOCK_STALE_MS = 4000;
/** Bounded wait for such a lock to go stale; a live holder is reported at once. */
const LOCK_WAIT_MS = LOCK_STALE_MS * 3;
const LOCK_RETRY_MS = 200;
/**
 * The guard is held for a few file operations, and refreshed while held; the margin keeps a
 * holder starved of CPU on a loaded machine from losing it to a second starter.
 */
const GUARD_STALE_MS = 5000;
const GUARD_RETRY_MS = 25;

export interface InstanceLockOptions {
  lockPath: string;
  guardPath: string;
  pidPath: string;
  lockTarget: string;
  probe: ProcessProbe;
  onCompromised: (error: Error) => void;
  /** The lock of a daemon that is provably gone was removed instead of waiting for it to go stale. */
  onTakeover: (deadPid: number) => void;
}

export type ReleaseLock = () => Promise<void>;

/**
 * One daemon per user (STYLE 5: lock, clear, listen). A live holder is reported at once as
 * `already running (pid N)`. A holder whose pid record names a process that is gone (exited, a
 * zombie nobody reaped, or its pid reused) loses the lock at once: waiting out the staleness
 * window is only for a holder that died before writing its record.
 */
export async function acquireInstanceLock(options: InstanceLockOptions): Promise<ReleaseLock> {
  // Monotonic: a wall clock stepped meanwhile would end the wait at once or make it endless.
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (;;) {
    const release = await underGuard(options, () => lockOrTakeOver(options));
    if (release !== null) return release;
    if (performance.now() > deadline) {
      throw new SandboxdError('DAEMON_ALREADY_RUNNING', `the daemon lock ${options.lockPath} is held and did not go stale`, {
        remedy: `If no sandboxd runs (\`pgrep -f "sandboxd daemon"\`), remove ${options.lockPath}.`,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
  }
}

/**
 * Taking the lock and writing the pid record happen under a short guard lock, so whoever reads
 * the record under the guard knows it describes the lock that is there, and two starters cannot
 * both remove a dead holder's lock and each believe they own the next one.
 */
async function underGuard<T>(options: InstanceLockOptions, fn: () => Promise<T | null>): Promise<T | null> {
  let release: () => Promise<void>;
  try {
    // Keyed by its own path: proper-lockfile tracks one lock per target, and the daemon lock's
    // target is lockTarget.
    release = await lockfile.lock(options.guardPath, {
      lockfilePath: options.guardPath,
      realpath: false,
      stale: GUARD_STALE_MS,
      // Long enough to outlast a guard left by a starter killed while holding it.
      retries: { retries: Math.ceil((GUARD_STALE_MS * 1.5) / GUARD_RETRY_MS), factor: 1, minTimeout: GUARD_RETRY_MS, maxTimeout: GUARD_RETRY_MS },
      // Only a guard held past its staleness is taken over; the daemon lock's own check still stands.
      onCompromised: () => undefined,
    });
  } catch (error) {
    // Busy for its whole staleness window: the caller retries within its own deadline.
    if ((error as NodeJS.ErrnoException).code === 'ELOCKED') return null;
    throw error;
  }
  try {
    return await fn();
  } finally {
    await release().catch(() => undefined);
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.lstat(file);
    return true;
  } catch {
    return false;
  }
}

/**
 * The release function, or null when the holder left no record and its lock must go stale. The
 * record is read before the lock's age is looked at: a live holder keeps its lock even when a
 * stall (SIGSTOP, a laptop's sleep) let its mtime grow old, and a dead one loses it at once.
 */
async function lockOrTakeOver(options: InstanceLockOptions): Promise<ReleaseLock | null> {
  const holder = (await exists(options.lockPath)) ? await readPidRecord(options.pidPath) : null;
  if (holder !== null) {
    // A record naming this very pid is a predecessor's whose pid we were given again.
    if (holder.pid !== process.pid && (await options.probe.isSame(holder.pid, holder.startTime))) {
      throw new SandboxdError('DAEMON_ALREADY_RUNNING', `already running (pid ${holder.pid})`);
    }
    await fs.rm(options.lockPath, { recursive: true, force: true });
    options.onTakeover(holder.pid);
  }
  try {
    return await lockAndRecord(options);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOCKED') return null;
    throw error;
  }
}

async function lockAndRecord(options: InstanceLockOptions): Promise<ReleaseLock> {
  const release = await lockfile.lock(options.lockTarget, {
    lockfilePath: options.lockPath,
    realpath: false,
    stale: LOCK_STALE_MS,
    onCompromised: options.onCompromised,
  });
  const startTime = await options.probe.startTime(process.pid);
  await writeFileAtomic(options.pidPath, JSON.stringify({ pid: process.pid, startTime }), 0o600);
  return async () => {
    await fs.rm(options.pidPath, { force: true });
    await release().catch(() => undefined);
  };
}
