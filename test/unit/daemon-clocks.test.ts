import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Daemon } from '../../daemon/composition/daemon.js';
import { observeSubprocesses } from '../../daemon/os/subprocess.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, waitFor } from '../helpers.js';
import { memoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const HEADERS = { 'sandboxd-protocol': String(PROTOCOL_VERSION) };
const HOUR = 3_600_000;

/**
 * The whole daemon with both clocks injected through its composition root: a fake monotonic clock
 * and a fake wall clock that tests step apart, as an NTP step or a user setting the date does.
 * Sweeps are run by hand, one per 2 s of fake time; every client pid counts as alive.
 */
function clockedDaemon() {
  const dir = mkdtempSync('/tmp/sbx-clock-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const cwd = path.join(dir, 'work');
  mkdirSync(cwd);
  let wall = Date.UTC(2031, 0, 1);
  let monotonic = 1_000;
  const daemon: Daemon = memoryDaemon(dir, {}, undefined, { now: () => wall, monotonic: () => monotonic });
  cleanup.add(() => daemon.close());
  const acquire = async (): Promise<string> => {
    const reply = await daemon.app.inject({ method: 'POST', url: '/v1/sessions', headers: HEADERS, payload: { engine: 'docker', client: { pid: process.pid, cwd, path: process.env.PATH }, sshAgent: 'off' } });
    expect(reply.statusCode).toBe(201);
    return reply.json<{ session: { id: string } }>().session.id;
  };
  const heartbeat = async (id: string): Promise<void> => {
    const reply = await daemon.app.inject({ method: 'POST', url: `/v1/sessions/${id}/heartbeat`, headers: HEADERS });
    expect(reply.statusCode).toBe(200);
  };
  const sessions = async (): Promise<{ id: string; lastHeartbeatAt: string }[]> =>
    (await daemon.app.inject({ method: 'GET', url: '/v1/sessions', headers: HEADERS })).json<{ sessions: { id: string; lastHeartbeatAt: string }[] }>().sessions;
  return {
    daemon,
    acquire,
    heartbeat,
    sessions,
    /** Both clocks move on, as time passes. */
    advance: (ms: number) => {
      monotonic += ms;
      wall += ms;
    },
    stepWall: (ms: number) => {
      wall += ms;
    },
    wallNow: () => wall,
    monotonicNow: () => monotonic,
  };
}

describe.each([
  ['back', -3 * HOUR],
  ['forward', 3 * HOUR],
])('a daemon whose wall clock is stepped %s by 3 h', (_direction, step) => {
  it('reaps stopped clients on schedule and keeps the session of one that heartbeats', async () => {
    const t = clockedDaemon();
    const start = t.monotonicNow();
    /** When each session went, in monotonic ms from the start. */
    const reapedAt = new Map<string, number>();
    const tick = async (): Promise<void> => {
      t.advance(2_000);
      await t.daemon.registry.sweep();
      for (const id of [before, after]) if (id !== '' && !reapedAt.has(id) && !t.daemon.registry.has(id)) reapedAt.set(id, t.monotonicNow() - start);
    };
    const live = await t.acquire();
    // Clients stopped with Ctrl-Z, never heard from again: one acquired before the step, one after.
    const before = await t.acquire();
    let after = '';
    await tick();
    t.stepWall(step);
    after = await t.acquire();
    for (let beat = 1; beat <= 40; beat += 1) {
      await tick();
      if (beat % 5 === 0) await t.heartbeat(live);
    }
    // Each lease ends at the first 2 s sweep more than a TTL (30 s) after its acquire.
    expect(Object.fromEntries(reapedAt)).toEqual({ [before]: 32_000, [after]: 34_000 });
    // What people see is wall time, the stepped one (the last heartbeat came after the last sweep).
    expect(await t.sessions()).toEqual([expect.objectContaining({ id: live, lastHeartbeatAt: new Date(t.wallNow()).toISOString() })]);
  });
});

it("a wall clock stepped back does not keep cached answers fresh: git runs again once the git cache's TTL has passed", async () => {
  const t = clockedDaemon();
  const gitRuns: (readonly string[])[] = [];
  observeSubprocesses((event) => {
    if (path.basename(event.file) === 'git') gitRuns.push(event.args);
  });
  // The first answer is computed before its files are known; the second is kept (FingerprintCache).
  await t.acquire();
  await t.acquire();
  const first = gitRuns.length;
  expect(first).toBeGreaterThan(0);
  t.stepWall(-3 * HOUR);
  t.advance(11_000);
  // Past the TTL (10 s) on the monotonic clock: the answer serves, and git runs again in the
  // background after a quiet moment.
  await t.acquire();
  await waitFor(() => gitRuns.length > first, 'git to run again in the background', 10_000);
});
