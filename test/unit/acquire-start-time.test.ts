import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
function daemonWith(cheap: boolean, previous: { key: string; clientStartTime: string } | null = null) {
  const dir = mkdtempSync('/tmp/sbx-start-time-');
  if (previous !== null) {
    // What a daemon killed while this client held a container left behind.
    mkdirSync(path.join(dir, 'containers'), { recursive: true, mode: 0o700 });
    const left = { key: previous.key, sessionId: previous.key, engine: 'docker', clientPid: CLIENT_PID, clientStartTime: previous.clientStartTime, path: '', env: {}, globalArgs: [] };
    writeFileSync(path.join(dir, 'containers', `${previous.key}.json`), JSON.stringify(left), { mode: 0o600 });
  }
  const probe = fakeProbe(cheap);
  probe.processes.set(CLIENT_PID, 'started-1');
  const daemon = memoryDaemon(dir, {}, probe);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  cleanup.add(() => daemon.close());
  const post = (body: Record<string, unknown>) =>
    daemon.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) },
      payload: { engine: 'docker', client: { pid: CLIENT_PID, cwd: '/' }, sshAgent: 'off', ...body },
    });
  const acquire = async (renews?: string): Promise<string> => {
    const reply = await post(renews === undefined ? {} : { renews });
    expect(reply.statusCode).toBe(201);
    return reply.json<{ session: { id: string } }>().session.id;
  };
  const recordFile = (key: string): string => path.join(dir, 'containers', `${key}.json`);
  /** The container record on disk (what a daemon started later goes by); undefined when there is none. */
  const record = (key: string): { sessionId: string; clientStartTime: string | null } | undefined =>
    existsSync(recordFile(key)) ? (JSON.parse(readFileSync(recordFile(key), 'utf8')) as { sessionId: string; clientStartTime: string | null }) : undefined;
  const recorded = (key: string): string | null | undefined => record(key)?.clientStartTime;
  return { dir, daemon, probe, post, acquire, record, recorded };
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
    const previous = 'ses_previous0001';
    const same = daemonWith(false, { key: previous, clientStartTime: 'started-1' });
    const renewed = await same.acquire(previous);
    expect(same.probe.reads).toBe(1);
    expect(same.record(previous)?.sessionId).toBe(renewed);

    // The pid now belongs to another process (started later): the container stays with the old lease.
    const reused = daemonWith(false, { key: previous, clientStartTime: 'started-0' });
    await reused.acquire(previous);
    expect(reused.probe.reads).toBe(1);
    expect(reused.record(previous)?.sessionId).toBe(previous);
  });
});

describe("the container record of an acquire", () => {
  it('is not left behind by an acquire that fails', async () => {
    const { daemon, post, dir } = daemonWith(true);
    const reply = await post({ sshAgent: 'on' });
    expect(reply.json<{ error: { code: string; message: string } }>().error).toMatchObject({
      code: 'SSH_AGENT_UNAVAILABLE',
      message: 'ssh-agent is on but SSH_AUTH_SOCK is not set in the client environment',
    });
    await daemon.close();
    const left = existsSync(path.join(dir, 'containers')) ? readdirSync(path.join(dir, 'containers')) : [];
    expect(left).toEqual([]);
  });

  it('a renewal that fails takes no container over', async () => {
    const previous = 'ses_previous0002';
    const { daemon, post, record } = daemonWith(true, { key: previous, clientStartTime: 'started-1' });
    const reply = await post({ sshAgent: 'on', renews: previous });
    expect(reply.json<{ error: { code: string } }>().error.code).toBe('SSH_AGENT_UNAVAILABLE');
    await daemon.close();
    expect(record(previous)).toMatchObject({ sessionId: previous, clientStartTime: 'started-1' });
  });
});
