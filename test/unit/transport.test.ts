import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from '../../client/transport.js';
import { SESSIONS_ROUTE } from '../../shared/contracts/session-routes.js';
import { STATUS_ROUTE, StatusResponse } from '../../shared/contracts/status.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup } from '../helpers.js';
import { STATUS } from './status-fixture.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());


/** A daemon that answers every request with `status` and `body`, on a real Unix socket the client trusts. */
async function answering(status: number, body: unknown): Promise<string> {
  const dir = mkdtempSync('/tmp/sbx-transport-');
  const server = http.createServer((req, res) => {
    req.resume();
    // Framed by content-length, as fastify frames every answer of the daemon.
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'sandboxd-protocol': String(PROTOCOL_VERSION) });
    res.end(text);
  });
  return listening(server, dir);
}

/** `server` listening on `s.sock` in `dir`, both gone at the test's end. */
async function listening(server: http.Server, dir: string): Promise<string> {
  const socketPath = path.join(dir, 's.sock');
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  cleanup.add(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  );
  return socketPath;
}

const getStatus = (socketPath: string) => request({ socketPath, method: 'GET', route: STATUS_ROUTE }, StatusResponse);

describe('client transport', () => {
  it('parses an answer that keeps the contract', async () => {
    expect(await getStatus(await answering(200, STATUS))).toEqual(STATUS);
  });

  it('refuses an answer that breaks the contract with INVALID_RESPONSE, naming where in words of its own', async () => {
    await expect(getStatus(await answering(200, { ...STATUS, pid: 'one' }))).rejects.toMatchObject({
      code: 'INVALID_RESPONSE',
      message: "the daemon's answer to GET /v1/status does not match this client's protocol: pid is not what this client reads",
    });
    await expect(getStatus(await answering(200, { ...STATUS, counts: { sessions: 0, tunnels: 0, widgets: 1 } }))).rejects.toMatchObject({
      code: 'INVALID_RESPONSE',
      message: "the daemon's answer to GET /v1/status does not match this client's protocol: counts carries widgets, which this client does not know",
    });
    await expect(getStatus(await answering(200, []))).rejects.toMatchObject({
      code: 'INVALID_RESPONSE',
      message: "the daemon's answer to GET /v1/status does not match this client's protocol: the answer is not what this client reads",
    });
  });

  it('an error status without the error shape is INVALID_RESPONSE; with it, the daemon\'s own error', async () => {
    await expect(getStatus(await answering(500, { oops: true }))).rejects.toMatchObject({
      code: 'INVALID_RESPONSE',
      message: 'the daemon answered 500 without an error body',
    });
    await expect(getStatus(await answering(503, { error: { code: 'DAEMON_BUSY', message: 'too many requests', remedy: 'Retry.' } }))).rejects.toMatchObject({
      code: 'DAEMON_BUSY',
      message: 'too many requests',
      remedy: 'Retry.',
    });
  });

  it('a daemon that does not answer in time is DAEMON_TIMEOUT; an answer that is not HTTP is INVALID_RESPONSE', async () => {
    const dir = mkdtempSync('/tmp/sbx-transport-');
    // Each reads what it is sent, as the daemon does: a paused socket would never see the client close.
    const silent = net.createServer((socket) => socket.on('error', () => undefined).resume());
    const notHttp = net.createServer((socket) => socket.resume().end('SSH-2.0-OpenSSH_9.2\r\n\r\n'));
    await new Promise<void>((resolve) => silent.listen(path.join(dir, 'silent.sock'), resolve));
    await new Promise<void>((resolve) => notHttp.listen(path.join(dir, 'ssh.sock'), resolve));
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    cleanup.add(() => new Promise((resolve) => silent.close(resolve)));
    cleanup.add(() => new Promise((resolve) => notHttp.close(resolve)));
    await expect(request({ socketPath: path.join(dir, 'silent.sock'), method: 'GET', route: STATUS_ROUTE, timeoutMs: 300 }, StatusResponse)).rejects.toMatchObject({
      code: 'DAEMON_TIMEOUT',
      message: 'the daemon did not answer GET /v1/status within 300 ms',
    });
    await expect(getStatus(path.join(dir, 'ssh.sock'))).rejects.toMatchObject({
      code: 'INVALID_RESPONSE',
      message: `the daemon's answer to GET /v1/status is not HTTP: not an HTTP/1.1 status line: "SSH-2.0-OpenSSH_9.2"`,
    });
  });

  it('runs whileWaiting once the request is written, before the answer is read: the daemon here answers only after it ran', async () => {
    const dir = mkdtempSync('/tmp/sbx-transport-');
    const events: string[] = [];
    let ran: () => void = () => undefined;
    const waited = new Promise<void>((resolve) => {
      ran = resolve;
    });
    const server = http.createServer((req, res) => {
      req.resume().on('end', () => {
        events.push('request read');
        void waited.then(() => {
          const text = JSON.stringify(STATUS);
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'sandboxd-protocol': String(PROTOCOL_VERSION) });
          res.end(text);
        });
      });
    });
    const socketPath = await listening(server, dir);
    const whileWaiting = (): void => {
      events.push('while waiting');
      ran();
    };
    // Bounded: without the hook the daemon never answers, and the request fails with DAEMON_TIMEOUT.
    const answer = await request({ socketPath, method: 'POST', route: SESSIONS_ROUTE, body: { engine: 'podman' }, timeoutMs: 10_000, whileWaiting }, StatusResponse);
    events.push('answer read');
    expect(answer).toEqual(STATUS);
    expect(events.filter((event) => event !== 'request read')).toEqual(['while waiting', 'answer read']);
  });

  it('never sends an acquire twice: it opens its own connection, and one that dies unanswered fails the acquire', async () => {
    const dir = mkdtempSync('/tmp/sbx-transport-');
    // A daemon that answers each connection's first GET and keeps it; a request that arrives on a
    // kept connection finds it dead (the daemon closed it as the request came in), and an
    // acquire is read and then never answered (the daemon died working on it).
    const requests: { connection: number; line: string }[] = [];
    const text = JSON.stringify(STATUS);
    const answer = `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${String(Buffer.byteLength(text))}\r\nsandboxd-protocol: ${String(PROTOCOL_VERSION)}\r\n\r\n${text}`;
    const sockets: net.Socket[] = [];
    const daemon = net.createServer((socket) => {
      const connection = sockets.push(socket);
      let served = 0;
      socket.on('error', () => undefined).on('data', (data) => {
        requests.push({ connection, line: data.toString('latin1').split('\r\n')[0] ?? '' });
        served += 1;
        if (served > 1 || data.toString('latin1').startsWith('POST ')) socket.destroy();
        else socket.write(answer);
      });
    });
    const socketPath = path.join(dir, 's.sock');
    await new Promise<void>((resolve) => daemon.listen(socketPath, resolve));
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    cleanup.add(
      () =>
        new Promise((resolve) => {
          for (const socket of sockets) socket.destroy();
          daemon.close(resolve);
        }),
    );
    expect(await getStatus(socketPath)).toEqual(STATUS);
    const acquire = request({ socketPath, method: 'POST', route: SESSIONS_ROUTE, body: { engine: 'podman' } }, StatusResponse);
    await expect(acquire).rejects.toMatchObject({ code: 'DAEMON_NOT_RUNNING' });
    // Sent once, on a connection of its own: never on the kept one, never again on another.
    expect(requests).toEqual([
      { connection: 1, line: 'GET /v1/status HTTP/1.1' },
      { connection: 2, line: 'POST /v1/sessions HTTP/1.1' },
    ]);
    // A GET rides the kept connection, finds it dead before any answer, and is sent again once.
    expect(await getStatus(socketPath)).toEqual(STATUS);
    expect(requests.slice(2)).toEqual([
      { connection: 1, line: 'GET /v1/status HTTP/1.1' },
      { connection: 3, line: 'GET /v1/status HTTP/1.1' },
    ]);
  });
});
