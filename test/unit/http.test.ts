import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Daemon } from '../../daemon/composition/daemon.js';
import type { DaemonSettings } from '../../daemon/composition/daemon-deps.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { memoryDaemon } from './memory-daemon.js';

const opened: { daemon: Daemon; dir: string }[] = [];
afterEach(async () => {
  for (const { daemon, dir } of opened.splice(0)) {
    await daemon.close().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The whole daemon in memory (STYLE 4): fastify's inject stands in for the Unix socket. */
function daemon(settings: Partial<DaemonSettings> = {}): Daemon {
  const dir = mkdtempSync('/tmp/sbx-http-');
  const created = memoryDaemon(dir, settings);
  opened.push({ daemon: created, dir });
  return created;
}

/** The daemon on a real Unix socket, for what fastify's inject never sees (the parser, connections). */
async function listening(settings: Partial<DaemonSettings> = {}): Promise<string> {
  const subject = daemon(settings);
  const socketPath = path.join(mkdtempSync('/tmp/sbx-http-sock-'), 's.sock');
  opened.push({ daemon: subject, dir: path.dirname(socketPath) });
  await subject.app.listen({ path: socketPath });
  return socketPath;
}

interface RawReply {
  status: number;
  headers: string;
  body: unknown;
}

/** Sends bytes as they are and reads the reply until the daemon closes the connection. */
function rawExchange(socketPath: string, request: string, open: net.Socket[] = []): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath, () => socket.write(request));
    open.push(socket);
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
    socket.on('error', reject);
    socket.on('close', () => {
      const [head = '', body = ''] = text.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body: JSON.parse(body) as unknown });
    });
  });
}

const VERSION = { 'sandboxd-protocol': String(PROTOCOL_VERSION) };

describe('HTTP adapter', () => {
  it('refuses a client of another protocol version before doing anything; status answers any version', async () => {
    const { app } = daemon();
    for (const headers of [{}, { 'sandboxd-protocol': '1' }, { 'sandboxd-protocol': '99' }]) {
      const refused = await app.inject({ method: 'GET', url: '/v1/sessions', headers });
      expect(refused.statusCode).toBe(409);
      expect(refused.headers['sandboxd-protocol']).toBe(String(PROTOCOL_VERSION));
      expect(refused.json<{ error: { code: string } }>().error.code).toBe('PROTOCOL_MISMATCH');
    }
    const status = await app.inject({ method: 'GET', url: '/v1/status', headers: { 'sandboxd-protocol': '1' } });
    expect(status.statusCode).toBe(200);
  });

  it('stamps the protocol version on every reply, errors included', async () => {
    const { app } = daemon();
    const ok = await app.inject({ method: 'GET', url: '/v1/status' });
    expect(ok.headers['sandboxd-protocol']).toBe(String(PROTOCOL_VERSION));
    const missing = await app.inject({ method: 'GET', url: '/nope', headers: VERSION });
    expect(missing.statusCode).toBe(404);
    expect(missing.headers['sandboxd-protocol']).toBe(String(PROTOCOL_VERSION));
  });

  it('acquires a session without an agent and lists it', async () => {
    const { app } = daemon();
    const acquired = await app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: VERSION,
      payload: { engine: 'docker', client: { pid: process.pid, cwd: '/' }, sshAgent: 'auto' },
    });
    expect(acquired.statusCode).toBe(201);
    expect(acquired.json()).toMatchObject({ session: { ssh: { status: 'skipped', reason: 'SSH_AUTH_SOCK is not set in the client environment' } }, leaseTtlMs: 30_000, heartbeatIntervalMs: 10_000 });
    const list = await app.inject({ method: 'GET', url: '/v1/sessions', headers: VERSION });
    expect(list.json<{ sessions: unknown[] }>().sessions).toHaveLength(1);
  });

  it('takes one heartbeat for many sessions, answering the ids it does not know', async () => {
    const { app, registry } = daemon();
    const acquire = async () =>
      (await app.inject({ method: 'POST', url: '/v1/sessions', headers: VERSION, payload: { engine: 'docker', client: { pid: process.pid, cwd: '/' }, sshAgent: 'off' } })).json<{
        session: { id: string };
      }>().session.id;
    const [a, b] = [await acquire(), await acquire()];
    const beat = await app.inject({ method: 'POST', url: '/v1/heartbeats', headers: VERSION, payload: { sessions: [a, 'ses_gone0001', b] } });
    expect(beat.statusCode).toBe(200);
    expect(beat.json()).toEqual({ unknown: ['ses_gone0001'] });
    expect(registry.size).toBe(2);

    const refused = async (payload: unknown) => {
      const reply = await app.inject({ method: 'POST', url: '/v1/heartbeats', headers: VERSION, ...(payload === undefined ? {} : { payload: payload as object }) });
      expect(reply.statusCode).toBe(400);
      return reply.json<{ error: { code: string; message: string } }>().error;
    };
    expect(await refused({ sessions: [] })).toEqual({ code: 'BAD_REQUEST', message: 'invalid heartbeat batch: sessions: is empty', remedy: expect.any(String) as string });
    expect(await refused({ sessions: Array.from({ length: 1001 }, () => a) })).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'invalid heartbeat batch: sessions: has more than 1000 entries',
    });
    expect(await refused({ sessions: ['../etc'] })).toMatchObject({ code: 'BAD_REQUEST', message: 'invalid heartbeat batch: sessions.0: is not in the form sandboxd expects' });
    expect(await refused({ sessions: [a], extra: true })).toMatchObject({ code: 'BAD_REQUEST', message: 'invalid heartbeat batch: has fields sandboxd does not know (extra)' });
    expect(await refused(undefined)).toMatchObject({ code: 'BAD_REQUEST', message: 'invalid heartbeat batch: is missing' });
  });

  it('answers SHUTTING_DOWN in the error shape while it closes', async () => {
    const subject = daemon();
    await subject.app.ready();
    const closing = subject.close();
    const reply = await subject.app.inject({ method: 'GET', url: '/v1/status' });
    await closing;
    expect(reply.statusCode).toBe(503);
    expect(reply.json()).toEqual({ error: { code: 'SHUTTING_DOWN', message: 'the daemon is shutting down', remedy: 'The daemon is stopping; retry in a moment.' } });
  });

  it('answers HTTP parser failures (bad request line, 431, 408) in the error shape with the protocol header', async () => {
    const socketPath = await listening({ requestTimeoutMs: 300 });
    const garbage = await rawExchange(socketPath, 'THIS IS NOT HTTP\r\n\r\n');
    expect(garbage.status).toBe(400);
    expect(garbage.headers).toContain(`sandboxd-protocol: ${String(PROTOCOL_VERSION)}`);
    expect(garbage.body).toMatchObject({ error: { code: 'BAD_REQUEST', message: expect.stringContaining('malformed HTTP request') as string } });

    const huge = await rawExchange(socketPath, `GET /v1/status HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(huge.status).toBe(431);
    expect(huge.headers).toContain(`sandboxd-protocol: ${String(PROTOCOL_VERSION)}`);
    expect(huge.body).toEqual({ error: { code: 'HEADERS_TOO_LARGE', message: 'the request headers are larger than the daemon accepts', remedy: 'Send smaller request headers.' } });

    // Headers that never finish: the daemon gives up after requestTimeoutMs (checked every second).
    const slow = await rawExchange(socketPath, 'GET /v1/status HTTP/1.1\r\nhost: x\r\n');
    expect(slow.status).toBe(408);
    expect(slow.headers).toContain(`sandboxd-protocol: ${String(PROTOCOL_VERSION)}`);
    expect(slow.body).toMatchObject({ error: { code: 'REQUEST_TIMEOUT', message: 'the request did not arrive within 300 ms' } });
  });

  it('answers DAEMON_BUSY on connections past the limit and keeps serving the others', async () => {
    const socketPath = await listening({ maxConnections: 1 });
    const held: net.Socket[] = [];
    // The first connection stays open (its request never ends), taking the only slot.
    const first = net.connect(socketPath);
    held.push(first);
    await new Promise((resolve) => first.once('connect', resolve));
    first.write('GET /v1/status HTTP/1.1\r\nhost: x\r\n');
    const busy = await rawExchange(socketPath, 'GET /v1/status HTTP/1.1\r\nhost: x\r\n\r\n', held);
    expect(busy.status).toBe(503);
    expect(busy.headers).toContain(`sandboxd-protocol: ${String(PROTOCOL_VERSION)}`);
    expect(busy.body).toEqual({
      error: { code: 'DAEMON_BUSY', message: '2 connections are open, the limit is 1', remedy: 'The daemon is out of processes or file descriptors; retry in a moment.' },
    });
    first.destroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const served = await rawExchange(socketPath, 'GET /v1/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n', held);
    expect(served.status).toBe(200);
    for (const socket of held) socket.destroy();
  });

  it('clips an echoed 4 KiB value in error messages', async () => {
    const { app } = daemon();
    const cwd = `/${'d'.repeat(4000)}`;
    const reply = await app.inject({ method: 'POST', url: '/v1/sessions', headers: VERSION, payload: { engine: 'docker', client: { pid: process.pid, cwd }, sshAgent: 'off' } });
    expect(reply.statusCode).toBe(400);
    const { message } = reply.json<{ error: { message: string } }>().error;
    expect(message.length).toBeLessThanOrEqual(401);
    expect(message).toMatch(/…$/);
  });
});
