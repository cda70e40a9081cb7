import type { Clock, Timers } from '../../daemon/os/clock.js';

interface Pending {
  at: number;
  order: number;
  work: () => void;
  /** Set for `every`: it is due again this much later. */
  period: number | null;
}

/**
 * Both of the daemon's clocks and its timers, moved by the test: `advance` runs every timer that
 * falls due on the way, at its due time, in order, and lets the work it set off settle. `jump`
 * moves the clocks without firing anything on the way, as a stalled or sleeping daemon sees it.
 */
export class ManualTime {
  private wallMs: number;
  private monotonicMs = 1_000;
  private order = 0;
  private readonly pending = new Set<Pending>();

  constructor(wall = Date.UTC(2031, 0, 1)) {
    this.wallMs = wall;
  }

  readonly clock: Clock = {
    now: () => this.wallMs,
    monotonic: () => this.monotonicMs,
  };

  readonly timers: Timers = {
    after: (ms, work) => this.schedule(ms, work, null),
    every: (ms, work) => this.schedule(ms, work, ms),
  };

  /** Timers not yet run or cancelled. */
  get scheduled(): number {
    return this.pending.size;
  }

  async advance(ms: number): Promise<void> {
    const end = this.monotonicMs + ms;
    for (;;) {
      const next = [...this.pending].filter((timer) => timer.at <= end).sort((a, b) => a.at - b.at || a.order - b.order)[0];
      if (next === undefined) break;
      // A timer overdue after a jump runs now, and an interval's next run counts from then.
      this.move(Math.max(0, next.at - this.monotonicMs));
      if (next.period === null) this.pending.delete(next);
      else next.at = this.monotonicMs + next.period;
      next.work();
      await settle();
    }
    this.move(end - this.monotonicMs);
    await settle();
  }

  /** Both clocks on by `ms` with no timer run on the way: those due run at the next `advance`. */
  jump(ms: number): void {
    this.move(ms);
  }

  /** The wall clock alone, as an NTP step or a user setting the date moves it. */
  stepWall(ms: number): void {
    this.wallMs += ms;
  }

  private move(ms: number): void {
    this.monotonicMs += ms;
    this.wallMs += ms;
  }

  private schedule(ms: number, work: () => void, period: number | null): () => void {
    const timer: Pending = { at: this.monotonicMs + ms, order: this.order++, work, period };
    this.pending.add(timer);
    return () => {
      this.pending.delete(timer);
    };
  }
}

/** Lets promise chains a timer set off (a sweep's probe, a record write) run to their end. */
async function settle(): Promise<void> {
  for (let round = 0; round < 5; round += 1) await new Promise((resolve) => setImmediate(resolve));
}
