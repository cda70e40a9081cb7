import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { QuietTime } from '../../daemon/cache/quiet-time.js';
import { systemTimers } from '../../daemon/os/clock.js';
import { ManualTime } from './manual-time.js';

describe('QuietTime: background work waits for a moment without requests', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('runs half a second after it was set off when no request comes', () => {
    const quiet = new QuietTime(() => Date.now(), systemTimers);
    const work = vi.fn();
    quiet.touch();
    quiet.later(work);
    vi.advanceTimersByTime(499);
    expect(work).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(work).toHaveBeenCalledTimes(1);
  });

  it('waits out a burst of requests, then runs half a second after the last', () => {
    const quiet = new QuietTime(() => Date.now(), systemTimers);
    const work = vi.fn();
    quiet.later(work);
    for (let step = 0; step < 20; step += 1) {
      vi.advanceTimersByTime(100);
      quiet.touch();
    }
    expect(work).not.toHaveBeenCalled();
    vi.advanceTimersByTime(499);
    expect(work).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(work).toHaveBeenCalledTimes(1);
  });

  it('runs after ten seconds however busy the daemon is', () => {
    const quiet = new QuietTime(() => Date.now(), systemTimers);
    const start = Date.now();
    let ranAt = 0;
    const work = vi.fn(() => {
      ranAt = Date.now() - start;
    });
    quiet.later(work);
    for (let step = 0; step < 99; step += 1) {
      vi.advanceTimersByTime(100);
      quiet.touch();
    }
    expect(work).not.toHaveBeenCalled();
    // Requests keep coming: the deadline, not a quiet moment, starts it.
    for (let step = 0; step < 10 && work.mock.calls.length === 0; step += 1) {
      vi.advanceTimersByTime(100);
      quiet.touch();
    }
    expect(work).toHaveBeenCalledTimes(1);
    expect(ranAt).toBeGreaterThanOrEqual(10_000);
    expect(ranAt).toBeLessThanOrEqual(10_500);
  });

  it('drops the work still waiting when the daemon closes', () => {
    const quiet = new QuietTime(() => Date.now(), systemTimers);
    const work = vi.fn();
    quiet.later(work);
    quiet.touch();
    quiet.stop();
    vi.advanceTimersByTime(20_000);
    expect(work).not.toHaveBeenCalled();
  });
});

// The daemon's own timers, moved by the test (vitest's fake timers would stop ManualTime's settling).
describe('QuietTime on the daemon\'s injected timers', () => {
  it('leaves no timer behind when the daemon closes, and schedules none for work set off after', async () => {
    const time = new ManualTime();
    const quiet = new QuietTime(() => time.clock.monotonic(), time.timers);
    const work = vi.fn();
    quiet.later(work);
    // Requests keep coming: the work waits on a second timer, the one the close must cancel.
    await time.advance(400);
    quiet.touch();
    await time.advance(200);
    expect(time.scheduled).toBe(1);
    quiet.stop();
    expect(time.scheduled).toBe(0);
    // A sweep that was running when the daemon closed sets off its work after the stop.
    quiet.later(work);
    expect(time.scheduled).toBe(0);
    await time.advance(20_000);
    expect(work).not.toHaveBeenCalled();
  });
});
