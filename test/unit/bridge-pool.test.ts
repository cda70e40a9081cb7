import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import type { Bridge } from '../../daemon/bridges/bridge.js';
import { BridgePool } from '../../daemon/bridges/bridge-pool.js';
import { createLogger } from '../../daemon/os/logger.js';

/** Stands in for a relay or ssh tunnel: readiness is whatever the test resolves. */
class FakeBridge implements Bridge {
  starts = 0;
  halts = 0;
  restarts = 0;
  private resolveReady: () => void = () => undefined;
  private rejectReady: (error: Error) => void = () => undefined;
  private readonly ready = new Promise<void>((resolve, reject) => {
    this.resolveReady = resolve;
    this.rejectReady = reject;
  });

  constructor(readonly id: string) {
    this.ready.catch(() => undefined);
  }
  start(): void {
    this.starts += 1;
  }
  whenReady(): Promise<void> {
    return this.ready;
  }
  succeed(): void {
    this.resolveReady();
  }
  fail(error: Error): void {
    this.rejectReady(error);
  }
  restart(): Promise<void> {
    this.restarts += 1;
    return Promise.resolve();
  }
  halt(): Promise<void> {
    this.halts += 1;
    return Promise.resolve();
  }
  describe(refs: number): BridgeInfo {
    return { id: this.id, kind: 'relay', connection: null, hostAgentSocket: '/a', socketPath: '/s', state: 'ready', refs, endpoints: refs, open: 0, refused: 0, pid: null, restarts: this.restarts, createdAt: new Date(0).toISOString(), lastError: null };
  }
}

describe('BridgePool', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const pool = () => new BridgePool({ idleMs: 60_000, logger: createLogger({ kind: 'silent' }) });

  it('shares one bridge among concurrent acquirers of one key', async () => {
    const bridges: FakeBridge[] = [];
    const subject = pool();
    const create = () => {
      const bridge = new FakeBridge(`relay_${bridges.length}xxxxxx`);
      bridges.push(bridge);
      return bridge;
    };
    const pending = Array.from({ length: 20 }, () => subject.acquire('k', create));
    bridges[0]?.succeed();
    const leases = (await Promise.all(pending)).map((held) => held.lease);
    expect(bridges).toHaveLength(1);
    expect(bridges[0]?.starts).toBe(1);
    expect(subject.list()[0]?.refs).toBe(20);
    for (const lease of leases) lease.release();
    leases[0]?.release();
    expect(subject.list()[0]?.refs).toBe(0);
  });

  it('keeps an unused bridge for the idle grace period, then halts it', async () => {
    const subject = pool();
    const bridge = new FakeBridge('relay_aaaaaaaa');
    bridge.succeed();
    const { lease } = await subject.acquire('k', () => bridge);
    lease.release();
    await vi.advanceTimersByTimeAsync(59_000);
    const { lease: again } = await subject.acquire('k', () => new FakeBridge('relay_other000'));
    expect(again.bridgeId).toBe('relay_aaaaaaaa');
    again.release();
    await vi.advanceTimersByTimeAsync(60_001);
    expect(bridge.halts).toBe(1);
    expect(subject.size).toBe(0);
  });

  it('drops a bridge that failed to become ready so the next acquire starts afresh', async () => {
    const subject = pool();
    const broken = new FakeBridge('relay_broken00');
    broken.fail(new SandboxdError('INTERNAL', 'boom'));
    await expect(subject.acquire('k', () => broken)).rejects.toMatchObject({ code: 'INTERNAL', message: 'boom' });
    expect(broken.halts).toBe(1);
    const fresh = new FakeBridge('relay_fresh000');
    fresh.succeed();
    expect((await subject.acquire('k', () => fresh)).lease.bridgeId).toBe('relay_fresh000');
  });

  it('restarts and removes by id; unknown ids report null/false', async () => {
    const subject = pool();
    const bridge = new FakeBridge('relay_aaaaaaaa');
    bridge.succeed();
    await subject.acquire('k', () => bridge);
    expect((await subject.restart('relay_aaaaaaaa'))?.restarts).toBe(1);
    expect(await subject.restart('relay_nope0000')).toBeNull();
    expect(await subject.remove('relay_aaaaaaaa')).toBe(true);
    expect(bridge.halts).toBe(1);
    expect(await subject.remove('relay_aaaaaaaa')).toBe(false);
  });
});
