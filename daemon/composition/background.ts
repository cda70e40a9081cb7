import type { Timers } from '../os/clock.js';
import type { Logger } from '../os/logger.js';

/** Work no request waits for but a graceful close does: a removal or record write under way finishes. */
export class TrackedWork {
  private readonly pending = new Set<Promise<void>>();

  /** Its failure goes to `onError`, never to whoever closes. */
  track(work: Promise<unknown>, onError: (error: unknown) => void): void {
    const settled = work.then(() => undefined, onError);
    this.pending.add(settled);
    void settled.finally(() => this.pending.delete(settled));
  }

  async settled(): Promise<void> {
    await Promise.all(this.pending);
  }
}

/** A periodic job that skips a tick while its previous run is still going; failures are logged. */
function exclusive(job: () => Promise<void>, logger: Logger, what: string): () => void {
  let running = false;
  return () => {
    if (running) return;
    running = true;
    job()
      .catch((error: unknown) => {
        logger.error({ err: error }, `${what} failed`);
      })
      .finally(() => {
        running = false;
      });
  };
}

export interface Sweeps {
  /** The containers of sessions a killed daemon left, and those of sessions that ended unseen. */
  containers(): Promise<void>;
  /** Leases whose clients went quiet or died. */
  sessions(): Promise<void>;
  /** Each bridge looks at its socket: one that is not the socket it bound is re-created. */
  bridges(): Promise<void>;
}

/**
 * Runs the sweeps every `intervalMs` on the injected timers, the container sweep once at once too;
 * answers the cancel. Each sweep is its own job: a slow engine must not hold up noticing dead clients.
 */
export function startSweeps(sweeps: Sweeps, intervalMs: number, timers: Timers, logger: Logger): () => void {
  const containers = exclusive(() => sweeps.containers(), logger, 'container sweep');
  const sessions = exclusive(() => sweeps.sessions(), logger, 'session sweep');
  const bridges = exclusive(() => sweeps.bridges(), logger, 'bridge check');
  containers();
  return timers.every(intervalMs, () => {
    containers();
    sessions();
    bridges();
  });
}
