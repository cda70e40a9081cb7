import { promises as fs } from 'node:fs';
import lockfile from 'proper-lockfile';
import { SandboxdError } from '../shared/errors.js';
import type { ProcessProbe } from './process-identity.js';
import { writeFileAtomic } from './atomic-file.js';

/** proper-lockfile's staleness window: how long a SIGKILLed holder keeps the lock. */
export const LOCK_STALE_MS = 4000;
/** Bounded wait for a dead holder's lock to go stale; a live holder is reported at once. */
const LOCK_WAIT_MS = LOCK_STALE_MS * 3;
const LOCK_RETRY_MS = 200;

interface PidRecord {
  pid: number;
  startTime: string | null;
}

export async function readPidRecord(pidPath: string): Promise<PidRecord | null> {
  try {
    const parsed = JSON.parse(await fs.readFile(pidPath, 'utf8')) as Partial<PidRecord>;
    return typeof parsed.pid === 'number' ? { pid: parsed.pid, startTime: parsed.startTime ?? null } : null;
  } catch {
    return null;
  }
}

export interface InstanceLockOptions {
  lockPath: string;
  pidPath: string;
  lockTarget: string;
  probe: ProcessProbe;
  onCompromised: (error: Error) => void;
}

export type ReleaseLock = () => Promise<void>;

/**
 * One daemon per user (STYLE 5: lock, clear, listen). A live holder is reported at once as
 * `already running (pid N)`; a holder that was SIGKILLed still owns the lock for LOCK_STALE_MS, so
 * we retry through that window instead of asking the user to clean up by hand.
 */
export async function acquireInstanceLock(options: InstanceLockOptions): Promise<ReleaseLock> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
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
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ELOCKED') throw error;
      const holder = await readPidRecord(options.pidPath);
      if (holder !== null && holder.pid !== process.pid && (await options.probe.isSame(holder.pid, holder.startTime))) {
        throw new SandboxdError('DAEMON_ALREADY_RUNNING', `already running (pid ${holder.pid})`);
      }
      if (Date.now() > deadline) {
        throw new SandboxdError('DAEMON_ALREADY_RUNNING', `the daemon lock ${options.lockPath} is held and did not go stale`, {
          remedy: `If no sandboxd runs (\`pgrep -f "sandboxd daemon"\`), remove ${options.lockPath}.`,
        });
      }
      await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
    }
  }
}
