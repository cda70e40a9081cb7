import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { acquireInstanceLock, type InstanceLockOptions } from '../../daemon/lifecycle/instance-lock.js';
import type { ProcessProbe } from '../../daemon/os/process-identity.js';
import { SandboxdError } from '../../shared/errors.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(async () => {
  vi.restoreAllMocks();
  await cleanup.run();
});

const LIVE_PID = 4242;
const DEAD_PID = 4343;
const HOUR_MS = 3_600_000;

/** Only LIVE_PID runs, started at 't0'; this process started at 'me'. */
const probe: ProcessProbe = {
  cheapStartTime: true,
  startTime: (pid) => Promise.resolve(pid === process.pid ? 'me' : pid === LIVE_PID ? 't0' : null),
  isSame: (pid, startTime) => Promise.resolve(pid === LIVE_PID && (startTime === null || startTime === 't0')),
  startTimes: (pids) => Promise.resolve(new Map(pids.filter((pid) => pid === LIVE_PID).map((pid) => [pid, 't0']))),
};

function lockOptions(): InstanceLockOptions & { takeovers: number[] } {
  const dir = mkdtempSync('/tmp/sbx-lock-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const takeovers: number[] = [];
  return {
    lockTarget: dir,
    lockPath: path.join(dir, 'daemon.lock'),
    guardPath: path.join(dir, 'daemon.lock.guard'),
    pidPath: path.join(dir, 'daemon.pid'),
    probe,
    onCompromised: () => undefined,
    onTakeover: (pid) => takeovers.push(pid),
    takeovers,
  };
}

/** What a holder leaves behind when it is SIGKILLed: a fresh lock dir and its pid record. */
function leftBehind(options: InstanceLockOptions, pid: number, startTime: string): void {
  mkdirSync(options.lockPath);
  writeFileSync(options.pidPath, JSON.stringify({ pid, startTime }));
}

async function acquire(options: InstanceLockOptions): Promise<void> {
  const release = await acquireInstanceLock(options);
  cleanup.add(release);
}

describe('acquireInstanceLock', () => {
  it('takes over at once from a holder that is gone, without waiting for its lock to go stale', async () => {
    const options = lockOptions();
    leftBehind(options, DEAD_PID, 't-old');
    await acquire(options);
    expect(options.takeovers).toEqual([DEAD_PID]);
    expect(JSON.parse(readFileSync(options.pidPath, 'utf8'))).toEqual({ pid: process.pid, startTime: 'me' });
    expect(existsSync(options.guardPath)).toBe(false);
  });

  it('takes over from a holder whose pid now belongs to another process', async () => {
    const options = lockOptions();
    leftBehind(options, LIVE_PID, 't-before-reuse');
    await acquire(options);
    expect(options.takeovers).toEqual([LIVE_PID]);
  });

  it('takes over a record naming this very pid (a predecessor whose pid we were given)', async () => {
    const options = lockOptions();
    leftBehind(options, process.pid, 'me');
    await acquire(options);
    expect(options.takeovers).toEqual([process.pid]);
  });

  it('reports a live holder at once as already running', async () => {
    const options = lockOptions();
    leftBehind(options, LIVE_PID, 't0');
    const error = await acquireInstanceLock(options).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(SandboxdError);
    expect(error).toMatchObject({ code: 'DAEMON_ALREADY_RUNNING', message: `already running (pid ${LIVE_PID})` });
    expect(options.takeovers).toEqual([]);
    expect(existsSync(options.lockPath)).toBe(true);
  });

  it('keeps the lock of a live holder whose lock looks stale (a stalled daemon)', async () => {
    const options = lockOptions();
    leftBehind(options, LIVE_PID, 't0');
    const past = new Date(Date.now() - 60_000);
    utimesSync(options.lockPath, past, past);
    const error = await acquireInstanceLock(options).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'DAEMON_ALREADY_RUNNING', message: `already running (pid ${LIVE_PID})` });
  });

  it('names the dead holder it takes over from even when its lock had gone stale anyway', async () => {
    const options = lockOptions();
    leftBehind(options, DEAD_PID, 't-old');
    const past = new Date(Date.now() - 60_000);
    utimesSync(options.lockPath, past, past);
    await acquire(options);
    expect(options.takeovers).toEqual([DEAD_PID]);
  });

  it('ignores a pid record left without a lock (a daemon stopped cleanly leaves neither)', async () => {
    const options = lockOptions();
    writeFileSync(options.pidPath, JSON.stringify({ pid: LIVE_PID, startTime: 't0' }));
    await acquire(options);
    expect(options.takeovers).toEqual([]);
    expect(JSON.parse(readFileSync(options.pidPath, 'utf8'))).toMatchObject({ pid: process.pid });
  });

  it('leaves a lock without a pid record to go stale, then takes it', async () => {
    const options = lockOptions();
    mkdirSync(options.lockPath);
    const past = new Date(Date.now() - 60_000);
    utimesSync(options.lockPath, past, past);
    await acquire(options);
    expect(options.takeovers).toEqual([]);
    expect(JSON.parse(readFileSync(options.pidPath, 'utf8'))).toMatchObject({ pid: process.pid });
  });

  it('waits for a held lock on the monotonic clock: a wall clock stepped an hour forward does not end the wait', async () => {
    const options = lockOptions();
    // A holder that left no pid record, whose lock stays fresh across the step.
    mkdirSync(options.lockPath);
    const later = new Date(Date.now() + 2 * HOUR_MS);
    utimesSync(options.lockPath, later, later);
    const realNow = Date.now.bind(Date);
    const acquired = acquireInstanceLock(options);
    // Stepped once the wait has begun (NTP, a laptop waking up).
    vi.spyOn(Date, 'now').mockImplementation(() => realNow() + HOUR_MS);
    // The holder lets go a few retries later.
    const holder = setTimeout(() => {
      rmSync(options.lockPath, { recursive: true, force: true });
    }, 500);
    cleanup.add(() => {
      clearTimeout(holder);
    });
    cleanup.add(await acquired);
    expect(JSON.parse(readFileSync(options.pidPath, 'utf8'))).toMatchObject({ pid: process.pid });
  });

  it('release removes the pid record and the lock', async () => {
    const options = lockOptions();
    const release = await acquireInstanceLock(options);
    await release();
    expect(existsSync(options.pidPath)).toBe(false);
    expect(existsSync(options.lockPath)).toBe(false);
  });
});
