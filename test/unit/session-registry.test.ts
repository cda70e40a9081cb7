import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import type { SessionInfo } from '../../shared/contracts/sessions.js';
import { createLogger } from '../../daemon/os/logger.js';
import { SessionRegistry } from '../../daemon/sessions/session-registry.js';
import { fakeProbe } from './fake-probe.js';


function info(id: string, pid: number): SessionInfo {
  const now = new Date(0).toISOString();
  return { id, engine: 'podman', label: null, clientPid: pid, createdAt: now, lastHeartbeatAt: now, ssh: { status: 'skipped', reason: 'off' }, container: null, refused: 0, git: null };
}

/** Both clocks advance together; `stepWall` sets the wall clock alone, as an NTP step or a user does. */
function setup(maxSessions = 10) {
  let monotonic = 0;
  let wall = 0;
  const probe = fakeProbe();
  const released: string[] = [];
  const logger = createLogger({ kind: 'silent' });
  const warnings: string[] = [];
  logger.warn = ((_fields: unknown, message: string) => void warnings.push(message)) as typeof logger.warn;
  const registry = new SessionRegistry({ clock: { now: () => wall, monotonic: () => monotonic }, probe, leaseTtlMs: 30_000, sweepIntervalMs: 2_000, maxSessions, logger });
  const lease = (id: string) => ({ bridgeId: id, release: () => void released.push(id) });
  const advance = (ms: number) => {
    monotonic += ms;
    wall += ms;
  };
  return { registry, probe, released, lease, advance, warnings, stepWall: (ms: number) => (wall += ms), monotonicNow: () => monotonic };
}

describe('SessionRegistry', () => {
  it('ends a session whose client pid is gone and releases its leases once', async () => {
    const { registry, probe, released, lease } = setup();
    probe.processes.set(100, 'boot-1');
    registry.add(info('ses_aaaaaaaa', 100), 'boot-1', [lease('relay_1')]);
    await registry.sweep();
    expect(registry.size).toBe(1);
    probe.processes.delete(100);
    await registry.sweep();
    expect(registry.size).toBe(0);
    expect(released).toEqual(['relay_1']);
    expect(registry.end('ses_aaaaaaaa', 'released')).toBe(false);
  });

  it('keeps listing a session that ended until its container is removed, and never renews or heartbeats it', async () => {
    const probe = fakeProbe();
    let removed: () => void = () => undefined;
    const removal = new Promise<void>((resolve) => (removed = resolve));
    const registry = new SessionRegistry({
      clock: { now: () => 0, monotonic: () => 0 },
      probe,
      leaseTtlMs: 30_000,
      sweepIntervalMs: 2_000,
      maxSessions: 10,
      logger: createLogger({ kind: 'silent' }),
      onEnd: (_info, reason) => (reason === 'released' ? undefined : removal),
    });
    registry.add(info('ses_aaaaaaaa', 100), 'boot-1', []);
    registry.add(info('ses_bbbbbbbb', 100), 'boot-1', []);
    registry.end('ses_aaaaaaaa', 'client-exited');
    registry.end('ses_bbbbbbbb', 'released');
    // A session is never shown ended while its container may still run.
    expect(registry.list().map((session) => session.id)).toEqual(['ses_aaaaaaaa']);
    expect({ size: registry.size, has: registry.has('ses_aaaaaaaa'), unknown: registry.heartbeatAll(['ses_aaaaaaaa']) }).toEqual({ size: 0, has: false, unknown: ['ses_aaaaaaaa'] });
    removed();
    await removal;
    await Promise.resolve();
    expect(registry.list()).toEqual([]);
  });

  it('treats a reused pid (other start time) as a dead client', async () => {
    const { registry, probe } = setup();
    probe.processes.set(100, 'boot-1');
    registry.add(info('ses_aaaaaaaa', 100), 'boot-1', []);
    probe.processes.set(100, 'boot-2');
    await registry.sweep();
    expect(registry.list()).toEqual([]);
  });

  it('expires a lease without heartbeats after the TTL, and heartbeats extend it', async () => {
    const { registry, probe, advance } = setup();
    probe.processes.set(1, 's');
    registry.add(info('ses_aaaaaaaa', 1), 's', []);
    registry.add(info('ses_bbbbbbbb', 1), 's', []);
    const sweepFor = async (ms: number) => {
      for (let elapsed = 0; elapsed < ms; elapsed += 2_000) {
        advance(2_000);
        await registry.sweep();
      }
    };
    await sweepFor(20_000);
    registry.heartbeat('ses_aaaaaaaa');
    await sweepFor(20_000);
    expect(registry.list().map((s) => s.id)).toEqual(['ses_aaaaaaaa']);
    expect(registry.list()[0]?.lastHeartbeatAt).toBe(new Date(20_000).toISOString());
  });

  it('keeps the lease of a stopped client (Ctrl-Z) however long it stays stopped; after it resumes, one TTL of silence ends it', async () => {
    const { registry, probe, advance } = setup();
    probe.processes.set(7, 's');
    registry.add(info('ses_aaaaaaaa', 7), 's', []);
    const sweepFor = async (ms: number) => {
      for (let elapsed = 0; elapsed < ms; elapsed += 2_000) {
        advance(2_000);
        await registry.sweep();
      }
    };
    probe.stopped.add(7);
    await sweepFor(120_000);
    expect(registry.size).toBe(1);
    // SIGCONT, and no heartbeat since: a whole TTL from the last sweep that saw it stopped.
    probe.stopped.delete(7);
    await sweepFor(30_000);
    expect(registry.size).toBe(1);
    await sweepFor(2_000);
    expect(registry.size).toBe(0);
  });

  it('gives live clients one more TTL when the daemon stalled before its first sweep', async () => {
    const { registry, probe, advance } = setup();
    probe.processes.set(1, 's');
    registry.add(info('ses_aaaaaaaa', 1), 's', []);
    // Stopped (SIGSTOP, a laptop asleep) right after the start: no sweep, no heartbeat arrived.
    advance(40_000);
    await registry.sweep();
    expect(registry.list().map((s) => s.id)).toEqual(['ses_aaaaaaaa']);
    registry.heartbeat('ses_aaaaaaaa');
    // Without heartbeats after the resume the lease ends once that TTL has run.
    for (let elapsed = 0; elapsed <= 32_000; elapsed += 2_000) {
      advance(2_000);
      await registry.sweep();
    }
    expect(registry.list()).toEqual([]);
  });

  it('extends every lease of a batch at once, reports the ids it does not know, and lets the others expire', async () => {
    const { registry, probe, advance } = setup();
    probe.processes.set(1, 's');
    for (const id of ['ses_aaaaaaaa', 'ses_bbbbbbbb', 'ses_cccccccc']) registry.add(info(id, 1), 's', []);
    const sweepFor = async (ms: number) => {
      for (let elapsed = 0; elapsed < ms; elapsed += 2_000) {
        advance(2_000);
        await registry.sweep();
      }
    };
    await sweepFor(20_000);
    expect(registry.heartbeatAll(['ses_aaaaaaaa', 'ses_gone0001', 'ses_bbbbbbbb', 'ses_gone0002'])).toEqual(['ses_gone0001', 'ses_gone0002']);
    await sweepFor(20_000);
    // ses_cccccccc was in no batch: its lease ran out; the batch's two run from its heartbeat.
    expect(registry.list().map((s) => [s.id, s.lastHeartbeatAt])).toEqual([
      ['ses_aaaaaaaa', new Date(20_000).toISOString()],
      ['ses_bbbbbbbb', new Date(20_000).toISOString()],
    ]);
    expect(registry.has('ses_gone0001')).toBe(false);
    await sweepFor(12_000);
    expect(registry.size).toBe(0);
  });

  it('refuses sessions past the limit and unknown heartbeats, with codes', () => {
    const { registry } = setup(1);
    registry.add(info('ses_aaaaaaaa', 1), null, []);
    expect(() => {
      registry.add(info('ses_bbbbbbbb', 1), null, []);
    }).toThrow(expect.objectContaining({ code: 'SESSION_LIMIT', message: '1 sessions are open, the limit is 1' }) as SandboxdError);
    expect(() => registry.heartbeat('ses_zzzzzzzz')).toThrow(expect.objectContaining({ code: 'SESSION_NOT_FOUND', message: 'no session ses_zzzzzzzz' }) as SandboxdError);
  });

  it('keeps the sessions of live clients across a daemon stall longer than the TTL, for one more TTL', async () => {
    const { registry, probe, released, lease, advance } = setup();
    probe.processes.set(1, 'live');
    probe.processes.set(2, 'dies');
    registry.add(info('ses_aaaaaaaa', 1), 'live', [lease('relay_a')]);
    registry.add(info('ses_bbbbbbbb', 2), 'dies', [lease('relay_b')]);
    await registry.sweep();
    // SIGSTOP or a laptop asleep: no sweep and no heartbeat for two TTLs.
    probe.processes.delete(2);
    advance(60_000);
    await registry.sweep();
    expect(registry.list().map((s) => s.id)).toEqual(['ses_aaaaaaaa']);
    expect(released).toEqual(['relay_b']);
    // The grace is one TTL from the resume: without a heartbeat by then, the lease ends as usual.
    for (let elapsed = 0; elapsed < 28_000; elapsed += 2_000) {
      advance(2_000);
      await registry.sweep();
    }
    expect(registry.size).toBe(1);
    advance(4_000);
    await registry.sweep();
    expect(registry.size).toBe(0);
    expect(released).toEqual(['relay_b', 'relay_a']);
  });

  it('does not mistake sweeps on time for a stall', async () => {
    const { registry, probe, advance } = setup();
    probe.processes.set(1, 's');
    registry.add(info('ses_aaaaaaaa', 1), 's', []);
    for (let elapsed = 0; elapsed <= 30_000; elapsed += 2_000) {
      advance(2_000);
      await registry.sweep();
    }
    expect(registry.size).toBe(0);
  });

  describe.each([
    ['back', -3 * 3_600_000],
    ['forward', 3 * 3_600_000],
  ])('a wall clock stepped %s by 3 h', (_direction, step) => {
    it('neither stops nor hastens the expiry of a stopped client, and is no stall', async () => {
      const { registry, probe, advance, stepWall, warnings, monotonicNow } = setup();
      /** Sweeps every 2 s until the session is gone (within two minutes): the monotonic time it went. */
      const goneAt = async (id: string): Promise<number> => {
        while (registry.has(id) && monotonicNow() < 120_000) {
          advance(2_000);
          await registry.sweep();
        }
        return monotonicNow();
      };
      // A stopped client (Ctrl-Z): its pid is alive, its heartbeats never come.
      probe.processes.set(1, 's');
      registry.add(info('ses_aaaaaaaa', 1), 's', []);
      advance(2_000);
      await registry.sweep();
      stepWall(step);
      // One acquired after the step, as the was.
      registry.add(info('ses_bbbbbbbb', 1), 's', []);
      // Each lease ends at the first sweep more than the TTL (30 s) after its acquire.
      expect(await goneAt('ses_aaaaaaaa')).toBe(32_000);
      expect(await goneAt('ses_bbbbbbbb')).toBe(34_000);
      expect(warnings).toEqual([]);
    });

    it('keeps a live session that heartbeats, and shows its heartbeat in wall time', async () => {
      const { registry, probe, advance, stepWall } = setup();
      probe.processes.set(1, 's');
      registry.add(info('ses_aaaaaaaa', 1), 's', []);
      for (let tick = 1; tick <= 60; tick += 1) {
        if (tick === 15) stepWall(step);
        advance(2_000);
        if (tick % 5 === 0) registry.heartbeat('ses_aaaaaaaa');
        await registry.sweep();
      }
      expect(registry.list().map((s) => [s.id, s.lastHeartbeatAt])).toEqual([['ses_aaaaaaaa', new Date(120_000 + step).toISOString()]]);
    });
  });
});
