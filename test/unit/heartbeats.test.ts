import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { heartbeatOnce, startHeartbeats, type HeartbeatSubject } from '../../client/heartbeats.js';
import type { Daemon } from '../../daemon/composition/daemon.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, waitFor } from '../helpers.js';
import { listeningMemoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const VERSION = { 'sandboxd-protocol': String(PROTOCOL_VERSION) };

/** A real daemon on a Unix socket (the client's own transport), recording every request it gets. */
async function listeningDaemon(): Promise<{ daemon: Daemon; socketPath: string; requests: string[]; acquire: () => Promise<string> }> {
  const { daemon, socketPath, requests } = await listeningMemoryDaemon('/tmp/sbx-hb-', cleanup);
  const acquire = async () => {
    const reply = await daemon.app.inject({ method: 'POST', url: '/v1/sessions', headers: VERSION, payload: { engine: 'docker', client: { pid: process.pid, cwd: '/' }, sshAgent: 'off' } });
    return reply.json<{ session: { id: string } }>().session.id;
  };
  return { daemon, socketPath, requests, acquire };
}

/** A daemon of a release before the batch route: 404 NOT_FOUND for it, one heartbeat per session. */
async function olderDaemon(known: Set<string>): Promise<{ socketPath: string; requests: string[] }> {
  const dir = mkdtempSync('/tmp/sbx-hb-old-');
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    requests.push(`${req.method ?? ''} ${req.url ?? ''}`);
    req.resume();
    const id = /^\/v1\/sessions\/([^/]+)\/heartbeat$/.exec(req.url ?? '')?.[1];
    const reply = (status: number, body: unknown) => {
      // Framed by content-length, as fastify frames every answer of the daemon.
      const text = JSON.stringify(body);
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...VERSION });
      res.end(text);
    };
    if (id === undefined) reply(404, { error: { code: 'NOT_FOUND', message: `no route ${req.method ?? ''} ${req.url ?? ''}`, remedy: 'Check the route; this daemon speaks /v1.' } });
    else if (!known.has(id)) reply(404, { error: { code: 'SESSION_NOT_FOUND', message: `no session ${id}`, remedy: 'Acquire a new one.' } });
    else {
      const now = new Date().toISOString();
      reply(200, { session: { id, engine: 'docker', label: null, clientPid: process.pid, createdAt: now, lastHeartbeatAt: now, ssh: { status: 'skipped', reason: 'off' }, container: null } });
    }
  });
  const socketPath = path.join(dir, 's.sock');
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  cleanup.add(() => new Promise((resolve) => server.close(resolve)));
  return { socketPath, requests };
}

function subject(id: string | null, lost: string[]): HeartbeatSubject {
  return { id: () => id, lost: (which) => lost.push(which) };
}

describe('client heartbeats', () => {
  it('sends one request for all held sessions and hands back only the leases the daemon lost', async () => {
    const { daemon, socketPath, requests, acquire } = await listeningDaemon();
    const [a, b] = [await acquire(), await acquire()];
    requests.length = 0;
    const lost: string[] = [];
    await heartbeatOnce(socketPath, [subject(a, lost), subject('ses_gone0001', lost), subject(b, lost), subject(null, lost)]);
    expect(requests).toEqual(['POST /v1/heartbeats']);
    expect(lost).toEqual(['ses_gone0001']);
    expect(daemon.registry.size).toBe(2);
  });

  it('splits more sessions than one batch takes into several requests', async () => {
    const { socketPath, requests } = await listeningDaemon();
    const lost: string[] = [];
    const ids = Array.from({ length: 1001 }, (_, index) => `ses_gone${String(index).padStart(6, '0')}`);
    await heartbeatOnce(socketPath, ids.map((id) => subject(id, lost)));
    expect(requests).toEqual(['POST /v1/heartbeats', 'POST /v1/heartbeats']);
    expect(lost).toEqual(ids);
  });

  it('falls back to one heartbeat per session when the daemon has no batch route', async () => {
    const { socketPath, requests } = await olderDaemon(new Set(['ses_aaaaaaaa']));
    const lost: string[] = [];
    await heartbeatOnce(socketPath, [subject('ses_aaaaaaaa', lost), subject('ses_gone0001', lost)]);
    expect(requests.sort()).toEqual(['POST /v1/heartbeats', 'POST /v1/sessions/ses_aaaaaaaa/heartbeat', 'POST /v1/sessions/ses_gone0001/heartbeat']);
    expect(lost).toEqual(['ses_gone0001']);
  });

  it('keeps quiet when no daemon answers: the next round tries again', async () => {
    const dir = mkdtempSync('/tmp/sbx-hb-none-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const lost: string[] = [];
    await heartbeatOnce(path.join(dir, 's.sock'), [subject('ses_aaaaaaaa', lost)]);
    expect(lost).toEqual([]);
  });

  it('runs one timer per daemon socket for all of a process\'s sessions, and stops with the last one', async () => {
    const { socketPath, requests, acquire } = await listeningDaemon();
    const ids = [await acquire(), await acquire(), await acquire()];
    requests.length = 0;
    const lost: string[] = [];
    const stops = ids.map((id) => startHeartbeats(socketPath, 50, subject(id, lost)));
    await waitFor(() => requests.length >= 3, 'three heartbeat rounds', 5_000, 10);
    expect(new Set(requests)).toEqual(new Set(['POST /v1/heartbeats']));
    stops[0]?.();
    stops[1]?.();
    const afterTwo = requests.length;
    await waitFor(() => requests.length > afterTwo, 'a round for the last session', 5_000, 10);
    stops[2]?.();
    // A round already sent may still land; after that, nothing.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const stopped = requests.length;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(requests.length).toBe(stopped);
    expect(lost).toEqual([]);
  });
});
