import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Daemon } from '../../daemon/composition/daemon.js';
import type { DaemonDeps } from '../../daemon/composition/daemon-deps.js';
import { createSubprocessRunner, type SubprocessEvent } from '../../daemon/os/subprocess.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, waitFor } from '../helpers.js';
import { ManualTime } from './manual-time.js';
import { memoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const HEADERS = { 'sandboxd-protocol': String(PROTOCOL_VERSION) };
const HOUR = 3_600_000;
const TTL_MS = 30_000;
const SWEEP_MS = 2_000;

/**
 * The whole daemon built from edges its composition root is given: both clocks and the timers are
 * the test's (ManualTime), so its sweeps and deferred refreshes run as the test moves time; the
 * runner is real but reports each subprocess to the test. Every client pid counts as alive.
 */
function clockedDaemon(deps: Partial<DaemonDeps> = {}) {
  const dir = mkdtempSync('/tmp/sbx-clock-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const cwd = path.join(dir, 'work');
  mkdirSync(cwd);
  // The client's PATH has git and no engine: a session's container removal spawns nothing, and no
  // engine of this machine is asked anything.
  const bin = path.join(dir, 'bin');
  mkdirSync(bin);
  symlinkSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim(), path.join(bin, 'git'));
  const time = new ManualTime();
  const spawned: SubprocessEvent[] = [];
  const run = createSubprocessRunner({ observe: (event) => spawned.push(event) });
  const daemon: Daemon = memoryDaemon(dir, { leaseTtlMs: TTL_MS, sweepIntervalMs: SWEEP_MS }, undefined, { clock: time.clock, timers: time.timers, run }, deps);
  cleanup.add(() => daemon.close());
  daemon.start();
  const acquire = async (): Promise<string> => {
    const reply = await daemon.app.inject({ method: 'POST', url: '/v1/sessions', headers: HEADERS, payload: { engine: 'docker', client: { pid: process.pid, cwd, path: bin }, sshAgent: 'off' } });
    expect(reply.statusCode).toBe(201);
    return reply.json<{ session: { id: string } }>().session.id;
  };
  const heartbeat = async (id: string): Promise<void> => {
    const reply = await daemon.app.inject({ method: 'POST', url: `/v1/sessions/${id}/heartbeat`, headers: HEADERS });
    expect(reply.statusCode).toBe(200);
  };
  const sessions = async (): Promise<{ id: string; lastHeartbeatAt: string }[]> =>
    (await daemon.app.inject({ method: 'GET', url: '/v1/sessions', headers: HEADERS })).json<{ sessions: { id: string; lastHeartbeatAt: string }[] }>().sessions;
  const gitRuns = (): number => spawned.filter((event) => path.basename(event.file) === 'git').length;
  return { daemon, time, acquire, heartbeat, sessions, gitRuns };
}

describe.each([
  ['back', -3 * HOUR],
  ['forward', 3 * HOUR],
])('a daemon whose wall clock is stepped %s by 3 h', (_direction, step) => {
  it('reaps stopped clients on schedule and keeps the session of one that heartbeats', async () => {
    const t = clockedDaemon();
    const start = t.time.clock.monotonic();
    /** When each session went, in monotonic ms from the start. */
    const reapedAt = new Map<string, number>();
    // One sweep interval of the daemon's own timers: its sweep runs at the end of it.
    const tick = async (): Promise<void> => {
      await t.time.advance(SWEEP_MS);
      for (const id of [before, after]) if (id !== '' && !reapedAt.has(id) && !t.daemon.registry.has(id)) reapedAt.set(id, t.time.clock.monotonic() - start);
    };
    const live = await t.acquire();
    // Clients stopped with Ctrl-Z, never heard from again: one acquired before the step, one after.
    const before = await t.acquire();
    let after = '';
    await tick();
    t.time.stepWall(step);
    after = await t.acquire();
    for (let beat = 1; beat <= 40; beat += 1) {
      await tick();
      if (beat % 5 === 0) await t.heartbeat(live);
    }
    // Each lease ends at the first 2 s sweep more than a TTL (30 s) after its acquire.
    expect(Object.fromEntries(reapedAt)).toEqual({ [before]: 32_000, [after]: 34_000 });
    // Ended sessions stay listed until their container is looked after (real file-system work,
    // slow under load): what people see once it is done is wall time, the stepped one (the last
    // heartbeat came after the last sweep).
    await waitFor(async () => (await t.sessions()).length === 1, 'the ended sessions to leave the list');
    expect(await t.sessions()).toEqual([expect.objectContaining({ id: live, lastHeartbeatAt: new Date(t.time.clock.now()).toISOString() })]);
  });
});

it("a wall clock stepped back does not keep cached answers fresh: git runs again once the git cache's TTL has passed", async () => {
  const t = clockedDaemon();
  // The first answer is computed before its files are known; the second is kept (FingerprintCache).
  await t.acquire();
  await t.acquire();
  const first = t.gitRuns();
  expect(first).toBeGreaterThan(0);
  t.time.stepWall(-3 * HOUR);
  await t.time.advance(11_000);
  // Past the TTL (10 s) on the monotonic clock: the answer serves, and git runs again in the
  // background at the next quiet moment, on the daemon's timers (warm-path.test.ts checks the order).
  await t.acquire();
  await t.time.advance(1_000);
  await waitFor(() => t.gitRuns() > first, 'git to run again in the background', 10_000);
});

describe("the daemon's sweeps run on its injected timers", () => {
  it('a draining daemon asks to stop once its own sweep ends the last lease', async () => {
    const stops: string[] = [];
    const t = clockedDaemon({ requestShutdown: (reason) => stops.push(reason) });
    await t.acquire();
    const drain = await t.daemon.app.inject({ method: 'POST', url: '/v1/drain', headers: HEADERS });
    expect(drain.json()).toEqual({ sessions: 1 });
    await t.time.advance(TTL_MS);
    expect(stops).toEqual([]);
    await t.time.advance(2 * SWEEP_MS);
    expect(stops).toEqual(['the last session ended; a newer sandboxd takes over']);
    // Listed until its container is looked after (here: no engine on its PATH to ask).
    await waitFor(async () => (await t.sessions()).length === 0, 'the ended session to leave the list');
  });

  it('timers late by more than a TTL (a stopped daemon) keep the lease of a live client; close cancels the sweeps', async () => {
    const t = clockedDaemon();
    const id = await t.acquire();
    await t.time.advance(3 * SWEEP_MS);
    // Stopped for three TTLs: no sweep and no heartbeat ran, then the overdue sweep runs at once.
    t.time.jump(3 * TTL_MS);
    await t.time.advance(0);
    expect((await t.sessions()).map((session) => session.id)).toEqual([id]);
    await t.daemon.close();
    expect(t.time.scheduled).toBe(0);
  });
});
