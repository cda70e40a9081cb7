import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, utimesSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { acquireSpawnLock, type LockClock } from '../../client/spawn-lock.js';
import { SandboxdError } from '../../shared/errors.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(async () => {
  vi.useRealTimers();
  await cleanup.run();
});

function lockPath(): string {
  const dir = mkdtempSync('/tmp/sbx-lock-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return path.join(dir, 'spawn.lock');
}

/** A clock whose sleeps pass no real time: each advances `now` and runs `onSleep`. */
function fakeClock(onSleep: () => Promise<void> = () => Promise.resolve()): LockClock & { sleeps: number } {
  const clock = {
    at: Date.now(),
    sleeps: 0,
    now: () => clock.at,
    sleep: async (ms: number) => {
      clock.sleeps += 1;
      clock.at += ms;
      await onSleep();
    },
  };
  return clock;
}

describe('the spawn lock: a directory, as proper-lockfile makes it', () => {
  it('is a directory while held and gone once released', async () => {
    const lock = lockPath();
    const release = await acquireSpawnLock(lock, 1_000, fakeClock());
    expect(statSync(lock).isDirectory()).toBe(true);
    await release();
    expect(existsSync(lock)).toBe(false);
  });

  it('a second client waits for the first to release it', async () => {
    const lock = lockPath();
    const first = await acquireSpawnLock(lock, 1_000, fakeClock());
    const clock = fakeClock(first);
    const second = await acquireSpawnLock(lock, 1_000, clock);
    expect(clock.sleeps).toBe(1);
    expect(statSync(lock).isDirectory()).toBe(true);
    await second();
  });

  it('a lock nobody touched for over 10 s is a dead client\'s: taken over at once', async () => {
    const lock = lockPath();
    mkdirSync(lock);
    const past = new Date(Date.now() - 11_000);
    utimesSync(lock, past, past);
    const clock = fakeClock();
    const release = await acquireSpawnLock(lock, 1_000, clock);
    expect(clock.sleeps).toBe(0);
    expect(Date.now() - statSync(lock).mtimeMs).toBeLessThan(10_000);
    await release();
  });

  it('a live holder that keeps it past the timeout: DAEMON_START_FAILED naming the lock', async () => {
    const lock = lockPath();
    await acquireSpawnLock(lock, 1_000, fakeClock());
    const error = await acquireSpawnLock(lock, 1_000, fakeClock()).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(SandboxdError);
    expect(error).toMatchObject({ code: 'DAEMON_START_FAILED', message: `another client held the start lock ${lock} for over 1000 ms` });
  });

  it('the holder touches it every 5 s, so it never looks stale while held', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const lock = lockPath();
    const release = await acquireSpawnLock(lock, 1_000, fakeClock());
    const past = new Date(Date.now() - 9_000);
    utimesSync(lock, past, past);
    vi.advanceTimersByTime(5_000);
    await vi.waitUntil(() => Date.now() - statSync(lock).mtimeMs < 5_000, { timeout: 5_000, interval: 10 });
    await release();
  });
});
