/**
 * The daemon's two clocks. Wall time is only shown to people (when a session was acquired, when a
 * probe ran); every age and deadline that decides something (leases, stall detection, grace, cache
 * ages) is measured on the monotonic clock, which nobody sets: a wall clock stepped back would
 * otherwise switch lease expiry off for as long as the step, and one stepped forward would expire
 * every lease at once.
 */
export interface Clock {
  /** Wall time in ms since the epoch: shown, never compared with another reading. */
  now(): number;
  /** Monotonic ms from an arbitrary origin: only differences of two readings mean anything. */
  monotonic(): number;
}

/**
 * The real clocks. `performance.now()` stops while the machine sleeps on Linux (CLOCK_MONOTONIC)
 * and runs on through sleep on macOS (libuv's clock there): a sleep then either ages nothing or
 * looks like a late sweep, which the session registry's stall grace covers.
 */
export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
};

/**
 * The daemon's timers, injected with its clock so a test that moves the clock fires them too.
 * Each returns its cancel; none keeps the process alive (the listening socket does that).
 */
export interface Timers {
  /** Runs `work` once, `ms` from now. */
  after(ms: number, work: () => void): () => void;
  /** Runs `work` every `ms`, the first time `ms` from now. */
  every(ms: number, work: () => void): () => void;
}

export const systemTimers: Timers = {
  after: (ms, work) => {
    const timer = setTimeout(work, ms);
    timer.unref();
    return () => {
      clearTimeout(timer);
    };
  },
  every: (ms, work) => {
    const timer = setInterval(work, ms);
    timer.unref();
    return () => {
      clearInterval(timer);
    };
  },
};

/**
 * The performance mark the `sandboxd` entry leaves on the process's timeline with how V8's code
 * cache served the daemon's start (client/cli/code-cache.ts); the daemon logs it when it listens.
 */
export const CODE_CACHE_MARK = 'sandboxd:code-cache';
