import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { holdLease } from '../../client/lease.js';
import type { AcquireResponse } from '../../shared/contracts/sessions.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, waitFor } from '../helpers.js';
import { listeningMemoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** A real daemon on a Unix socket, recording every request it gets; `acquire` renews `renews` when given. */
async function listeningDaemon() {
  const { daemon, socketPath, requests } = await listeningMemoryDaemon('/tmp/sbx-lease-', cleanup);
  const renewals: string[] = [];
  const acquire = async (renews?: string): Promise<AcquireResponse> => {
    if (renews !== undefined) renewals.push(renews);
    const reply = await daemon.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) },
      payload: { engine: 'docker', client: { pid: process.pid, cwd: '/' }, sshAgent: 'off', ...(renews === undefined ? {} : { renews }) },
    });
    return reply.json<AcquireResponse>();
  };
  return { daemon, socketPath, requests, renewals, acquire };
}

/** An answer for a lease this daemon never knew (as after its restart), heartbeating every 20 ms. */
function forgotten(acquired: AcquireResponse): AcquireResponse {
  return { ...acquired, session: { ...acquired.session, id: 'ses_forgotten01' }, heartbeatIntervalMs: 20 };
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

describe('the client lease', () => {
  it('renews a lease the daemon lost with the same request, under a new id, and releases that one', async () => {
    const { daemon, socketPath, renewals, acquire } = await listeningDaemon();
    const session = holdLease(forgotten(await acquire()), { socketPath, renew: acquire, heartbeat: true });
    await waitFor(() => session.id !== 'ses_forgotten01', 'the lease to be renewed', 5_000, 10);
    expect(renewals).toEqual(['ses_forgotten01']);
    expect(session.info.id).toBe(session.id);
    const renewed = session.id;
    expect(daemon.registry.has(renewed)).toBe(true);
    await session.release();
    expect(daemon.registry.has(renewed)).toBe(false);
  });

  it('releases once however often it is asked, and stops its heartbeats', async () => {
    const { daemon, socketPath, requests, acquire } = await listeningDaemon();
    const acquired = await acquire();
    const session = holdLease({ ...acquired, heartbeatIntervalMs: 20 }, { socketPath, renew: acquire, heartbeat: true });
    await waitFor(() => requests.includes('POST /v1/heartbeats'), 'a heartbeat', 5_000, 10);
    const [first, second, third] = [session.release(), session.release(), session[Symbol.asyncDispose]()];
    await Promise.all([first, second, third]);
    expect(second).toBe(first);
    expect(daemon.registry.size).toBe(0);
    const after = requests.length;
    // A round already sent may still land; after that, nothing.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const settled = requests.length;
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(requests.length).toBe(settled);
    expect(requests.slice(0, after).filter((line) => line.startsWith('DELETE'))).toEqual([`DELETE /v1/sessions/${acquired.session.id}`]);
  });

  it('drops the renewed lease when released while a renewal is under way', async () => {
    const { daemon, socketPath, acquire } = await listeningDaemon();
    const asked = deferred<null>();
    const proceed = deferred<null>();
    const session = holdLease(forgotten(await acquire()), {
      socketPath,
      renew: async (renews) => {
        asked.resolve(null);
        await proceed.promise;
        return acquire(renews);
      },
      heartbeat: true,
    });
    await asked.promise;
    const released = session.release();
    proceed.resolve(null);
    await released;
    expect(session.id).not.toBe('ses_forgotten01');
    expect(daemon.registry.has(session.id)).toBe(false);
  });

  it('sends no heartbeats when asked not to, and counts a daemon that is gone as released', async () => {
    const { socketPath, requests, acquire } = await listeningDaemon();
    const acquired = await acquire();
    const quiet = holdLease({ ...acquired, heartbeatIntervalMs: 20 }, { socketPath, renew: acquire, heartbeat: false });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(requests.filter((line) => line.includes('heartbeat'))).toEqual([]);
    await quiet.release();
    const gone = holdLease(acquired, { socketPath: path.join(path.dirname(socketPath), 'none.sock'), renew: acquire, heartbeat: false });
    await expect(gone.release()).resolves.toBeNull();
  });
});
