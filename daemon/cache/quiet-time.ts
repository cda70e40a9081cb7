import type { Timers } from '../os/clock.js';

/** Runs background work some time after now. */
export type Defer = (work: () => void) => void;

/** How long without a request counts as a quiet moment. */
const QUIET_MS = 500;
/** Background work waits no longer than this for a quiet moment. */
const MAX_WAIT_MS = 10_000;

/**
 * When background work a request set off runs: a refresh of a cached answer spawns git, podman or
 * a probe container, and each spawn forks the daemon, which stalls its event loop for a while.
 * Started at once, it would stall the request that set it off and the burst of sessions around
 * it, so it waits until no request has come for half a second, and never more than ten.
 */
export class QuietTime {
  private lastRequest = Number.NEGATIVE_INFINITY;
  private stopped = false;
  /** The cancels of the timers of work still waiting. */
  private readonly waiting = new Set<() => void>();

  /**
   * `now` must be monotonic (a wall clock set back would postpone the work), and the clock the
   * timers run on.
   */
  constructor(
    private readonly now: () => number,
    private readonly timers: Pick<Timers, 'after'>,
  ) {}

  /** A request arrived. */
  touch(): void {
    this.lastRequest = this.now();
  }

  /**
   * The daemon is closing: work still waiting is dropped (it would spawn past the close), its
   * timers with it, and work set off later (a sweep that was running) is never scheduled.
   */
  stop(): void {
    this.stopped = true;
    for (const cancel of this.waiting) cancel();
    this.waiting.clear();
  }

  readonly later: Defer = (work) => {
    if (this.stopped) return;
    const deadline = this.now() + MAX_WAIT_MS;
    const wait = (ms: number): void => {
      const cancel = this.timers.after(ms, () => {
        this.waiting.delete(cancel);
        check();
      });
      this.waiting.add(cancel);
    };
    const check = (): void => {
      const now = this.now();
      const quietFor = now - this.lastRequest;
      if (quietFor >= QUIET_MS || now >= deadline) work();
      else wait(Math.max(1, Math.min(QUIET_MS - quietFor, deadline - now)));
    };
    wait(QUIET_MS);
  };
}

/** For what runs outside a daemon: background work half a second later. */
export const later: Defer = (work) => {
  setTimeout(work, QUIET_MS).unref();
};
