import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, waitFor } from '../helpers.js';
import { fakeProbe } from './fake-probe.js';
import { memoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const CLIENT_PID = 4242;

/** The whole daemon in memory; `cheap` is Linux's /proc, otherwise macOS's `ps` (a subprocess per read). */
function daemonWith(cheap: boolean) {
  const dir = mkdtempSync('/tmp/sbx-start-time-');
  const probe = fakeProbe(cheap);
  probe.processes.set(CLIENT_PID, 'started-1');
  const daemon = memoryDaemon(dir, {}, probe);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  cleanup.add(() => daemon.close());
  const acquire = async (renews?: string): Promise<string> => {
    const reply = await daemon.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) },
      payload: { engine: 'docker', client: { pid: CLIENT_PID, cwd: '/' }, sshAgent: 'off', ...(renews === undefined ? {} : { renews }) },
    });
    expect(reply.statusCode).toBe(201);
    return reply.json<{ session: { id: string } }>().session.id;
  };
  /** What the container record on disk says of the client: what a daemon started later goes by. */
  const recorded = (id: string): string | null => {
    try {
      return (JSON.parse(readFileSync(path.join(dir, 'containers', `${id}.json`), 'utf8')) as { clientStartTime: string | null }).clientStartTime;
    } catch {
      return null;
    }
  };
  return { daemon, probe, acquire, recorded };
}

describe("the client's start time (pid reuse)", () => {
  it('is read on acquire where that is a file read (Linux)', async () => {
    const { daemon, probe, acquire } = daemonWith(true);
    await acquire();
    expect(probe.reads).toBe(1);
    // The client died and its pid went to another process before the first sweep.
    probe.processes.set(CLIENT_PID, 'started-2');
    await daemon.registry.sweep();
    expect(daemon.registry.size).toBe(0);
  });

  it('costs an acquire no subprocess where it would (macOS): the next sweep records it, and tells a reused pid apart from then on', async () => {
    const { daemon, probe, acquire, recorded } = daemonWith(false);
    const ids = [await acquire(), await acquire()];
    expect(probe.reads).toBe(0);
    expect(ids.map(recorded)).toEqual([null, null]);
    await daemon.registry.sweep();
    expect(daemon.registry.size).toBe(2);
    // The container records learn it too, for a daemon started later.
    await waitFor(() => ids.every((id) => recorded(id) === 'started-1'), 'the container records to get the start time', 5_000);
    probe.processes.set(CLIENT_PID, 'started-2');
    await daemon.registry.sweep();
    expect(daemon.registry.size).toBe(0);
  });

  it('is read for a renewal even where it costs a subprocess: only the client that held a container may take it over', async () => {
    const { probe, acquire } = daemonWith(false);
    await acquire('ses_previous0001');
    expect(probe.reads).toBe(1);
  });
});
