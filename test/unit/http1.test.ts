import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { exchange, ExchangeTimeout, MalformedReply, unreachable, type Exchange } from '../../client/http1.js';
import { Cleanup } from '../helpers.js';

const HTTP1_MODULE = fileURLToPath(new URL('../../dist/client/http1.js', import.meta.url));

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

function socketIn(prefix: string): string {
  const dir = mkdtempSync(`/tmp/sbx-http1-${prefix}-`);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return path.join(dir, 's.sock');
}

/** node's own HTTP server on a Unix socket: what the daemon (fastify) answers with. */
async function nodeServer(handler: http.RequestListener, configure: (server: http.Server) => void = () => undefined) {
  const socketPath = socketIn('node');
  const server = http.createServer(handler);
  configure(server);
  const connections: net.Socket[] = [];
  server.on('connection', (socket: net.Socket) => {
    connections.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  cleanup.add(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => { resolve(); });
      }),
  );
  return { socketPath, connections };
}

/** A raw server for the shapes node's server never sends: `onData` gets each connection's bytes. */
async function rawServer(onData: (socket: net.Socket, data: string, connection: number) => void) {
  const socketPath = socketIn('raw');
  let count = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    const connection = (count += 1);
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('data', (data) => {
      onData(socket, data.toString('latin1'), connection);
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  cleanup.add(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => { resolve(); });
      }),
  );
  return { socketPath, connections: () => count };
}

/** A server that writes a whole 200 answer one byte at a time, each after the last was flushed. */
function bytewiseServer(): ReturnType<typeof rawServer> {
  const answer = 'HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{"a":1}';
  return rawServer((socket) => {
    let at = 0;
    const next = (): void => {
      if (at < answer.length) socket.write(answer[at++] ?? '', next);
    };
    next();
  });
}

const get = (socketPath: string, extra: Partial<Exchange> = {}) => exchange({ socketPath, method: 'GET', path: '/v1/status', headers: {}, timeoutMs: 5_000, ...extra });

describe('HTTP/1.1 over the daemon socket', () => {
  it('reads a Content-Length body, refuses a chunked one (the daemon never sends one), and sends the method, path, headers and body', async () => {
    const seen: { method?: string; url?: string; header?: string; body: string }[] = [];
    const { socketPath } = await nodeServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, header: req.headers['sandboxd-protocol'] as string, body });
        if (req.url === '/length') {
          res.writeHead(201, { 'content-type': 'application/json', 'content-length': '11', 'Sandboxd-Protocol': '7' });
          res.end('{"ok":true}');
        } else {
          // No length: node's server frames the body in chunks, each write its own.
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write('{"parts":');
          res.end('[1,2]}');
        }
      });
    });
    const length = await exchange({ socketPath, method: 'POST', path: '/length', headers: { 'sandboxd-protocol': '7' }, body: '{"a":"é"}', timeoutMs: 5_000 });
    expect(length.status).toBe(201);
    expect(length.headers.get('sandboxd-protocol')).toBe('7');
    expect(length.body.toString()).toBe('{"ok":true}');
    await expect(get(socketPath, { path: '/chunked' })).rejects.toThrow(new MalformedReply('a body sent with transfer-encoding "chunked", not framed by content-length'));
    expect(seen).toEqual([
      { method: 'POST', url: '/length', header: '7', body: '{"a":"é"}' },
      { method: 'GET', url: '/chunked', header: undefined, body: '' },
    ]);
  });

  it('keeps one connection for a run of requests', async () => {
    const { socketPath, connections } = await nodeServer((_req, res) => {
      res.end('{}');
    });
    for (let run = 0; run < 5; run += 1) expect((await get(socketPath)).status).toBe(200);
    expect(connections).toHaveLength(1);
  });

  it('never holds a process open with a kept connection', async () => {
    const { socketPath } = await nodeServer(
      (_req, res) => res.end('{}'),
      (server) => {
        server.keepAliveTimeout = 60_000;
      },
    );
    // The compiled module (`npm test` builds first), in a process of its own that must end by itself.
    const script = `import(${JSON.stringify(HTTP1_MODULE)}).then((m) => m.exchange({ socketPath: ${JSON.stringify(socketPath)}, method: 'GET', path: '/', headers: {}, timeoutMs: 5000 })).then((r) => console.log(r.status))`;
    const child = await execa(process.execPath, ['-e', script], { timeout: 10_000, reject: false });
    expect(child).toMatchObject({ timedOut: false, exitCode: 0, stdout: '200' });
  });

  it("opens a new connection once the daemon closed the kept one (its keep-alive timeout)", async () => {
    const { socketPath, connections } = await nodeServer(
      (_req, res) => res.end('{}'),
      (server) => {
        server.keepAliveTimeout = 50;
      },
    );
    await get(socketPath);
    await new Promise<void>((resolve) => {
      const waitClosed = (): void => {
        if (connections[0]?.destroyed === true) resolve();
        else setTimeout(waitClosed, 10);
      };
      waitClosed();
    });
    expect((await get(socketPath)).body.toString()).toBe('{}');
    expect(connections).toHaveLength(2);
  });

  it('sends a request again on a new connection when the kept one was closed under it before any answer', async () => {
    const { socketPath, connections } = await rawServer((socket, _data, connection) => {
      // The first connection answers once, then drops the next request unanswered (a daemon
      // closing an idle connection just as the request arrived).
      if (connection === 1 && !socket.readableEnded) {
        if ((socket as net.Socket & { answered?: boolean }).answered === true) socket.destroy();
        else {
          (socket as net.Socket & { answered?: boolean }).answered = true;
          socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst');
        }
      } else socket.end('HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nsecond');
    });
    expect((await get(socketPath)).body.toString()).toBe('first');
    expect((await get(socketPath)).body.toString()).toBe('second');
    expect(connections()).toBe(2);
  });

  it('never sends a request that is not idempotent again: an acquire on a connection that dies unanswered fails, and the daemon saw it once', async () => {
    const posts: number[] = [];
    const { socketPath, connections } = await rawServer((socket, data, connection) => {
      if (!data.startsWith('POST /v1/sessions ')) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}');
      else {
        // A daemon that read the acquire, then died before answering it.
        posts.push(connection);
        socket.destroy();
      }
    });
    expect((await get(socketPath)).status).toBe(200);
    const acquire = exchange({ socketPath, method: 'POST', path: '/v1/sessions', headers: {}, body: '{}', timeoutMs: 5_000 });
    await expect(acquire).rejects.toMatchObject({ code: 'ECONNRESET' });
    expect(posts).toHaveLength(1);
    // An idempotent one (a heartbeat) goes over the kept connection the GET left.
    expect((await exchange({ socketPath, method: 'POST', path: '/v1/sessions/s_1/heartbeat', headers: {}, timeoutMs: 5_000, idempotent: true })).status).toBe(200);
    expect(connections()).toBe(2);
  });

  it('reads an answer that arrives a byte at a time, and a body framed by the end of the connection', async () => {
    const bytewise = await bytewiseServer();
    expect((await get(bytewise.socketPath)).body.toString()).toBe('{"a":1}');
    const untilEnd = await rawServer((socket) => socket.end('HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nto the end'));
    expect((await get(untilEnd.socketPath)).body.toString()).toBe('to the end');
  });

  it('asks the daemon to close with keepAlive false', async () => {
    const headers: (string | undefined)[] = [];
    const { socketPath, connections } = await nodeServer((req, res) => {
      headers.push(req.headers.connection);
      res.end('{}');
    });
    await get(socketPath, { keepAlive: false });
    await get(socketPath, { keepAlive: false });
    expect(headers).toEqual(['close', 'close']);
    expect(connections).toHaveLength(2);
  });

  it('gives up after its timeout when nothing answers, and closes the connection', async () => {
    let closed = false;
    const { socketPath } = await rawServer((socket) => {
      socket.on('close', () => (closed = true));
    });
    const error: unknown = await get(socketPath, { timeoutMs: 200 }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ExchangeTimeout);
    expect((error as Error).message).toBe('no answer within 200 ms');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(closed).toBe(true);
  });

  it('says when nothing listens, and when what answers is not HTTP', async () => {
    const missing = await get(path.join(path.dirname(socketIn('none')), 'absent.sock')).catch((caught: unknown) => caught);
    expect(missing).toMatchObject({ code: 'ENOENT' });
    expect(unreachable(missing)).toBe(true);
    const garbage = await rawServer((socket) => socket.end('SSH-2.0-OpenSSH_9.2\r\n\r\n'));
    const error: unknown = await get(garbage.socketPath).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(MalformedReply);
    expect((error as Error).message).toBe('not an HTTP/1.1 status line: "SSH-2.0-OpenSSH_9.2"');
    const hungUp = await rawServer((socket) => socket.end());
    const reset: unknown = await get(hungUp.socketPath).catch((caught: unknown) => caught);
    expect(reset).toMatchObject({ code: 'ECONNRESET', message: 'the daemon closed the connection before answering' });
    expect(unreachable(reset)).toBe(true);
  });
});

/**
 * On Bun the connection is Bun's own socket (client/wire.ts), so the exchanges that matter are run
 * again in a Bun process, with the compiled module, against servers in this one: what it reports,
 * and what the servers saw, must be what node:net gives above.
 */
describe('HTTP/1.1 over the daemon socket, on Bun\'s own socket', () => {
  const BUN = fileURLToPath(new URL('../../node_modules/.bin/bun', import.meta.url));
  const CHILD = `
    const { exchange, unreachable, ExchangeTimeout } = await import(${JSON.stringify(HTTP1_MODULE)});
    const sockets = JSON.parse(process.argv.at(-1));
    const get = (socketPath, extra = {}) => exchange({ socketPath, method: 'GET', path: '/v1/status', headers: {}, timeoutMs: 5000, ...extra });
    const failure = async (promise) => promise.then(() => null, (error) => ({ code: error.code ?? null, name: error.constructor.name, unreachable: unreachable(error), message: error.message }));
    const out = { bun: typeof Bun.connect };
    out.kept = [];
    for (let run = 0; run < 5; run += 1) out.kept.push((await get(sockets.kept)).status);
    const body = 'x'.repeat(300 * 1024);
    out.big = (await exchange({ socketPath: sockets.echo, method: 'POST', path: '/echo', headers: {}, body, timeoutMs: 5000 })).body.toString();
    out.resent = [(await get(sockets.resend)).body.toString(), (await get(sockets.resend)).body.toString()];
    out.acquire = await failure(exchange({ socketPath: sockets.acquire, method: 'POST', path: '/v1/sessions', headers: {}, body: '{}', timeoutMs: 5000 }));
    out.missing = await failure(get(sockets.missing));
    out.notSocket = await failure(get(sockets.notSocket));
    out.silent = await failure(get(sockets.silent, { timeoutMs: 200 }));
    out.bytewise = (await get(sockets.bytewise)).body.toString();
    console.log(JSON.stringify(out));
  `;

  it('keeps one connection, writes a body larger than the socket takes at once, never sends an acquire twice, and says what failed as node:net does', async () => {
    const kept = await nodeServer((_req, res) => res.end('{}'));
    const echo = await nodeServer((req, res) => {
      let length = 0;
      req.on('data', (chunk: Buffer) => (length += chunk.length));
      req.on('end', () => res.end(String(length)));
    });
    const resend = await rawServer((socket, _data, connection) => {
      if (connection === 1 && (socket as net.Socket & { answered?: boolean }).answered === true) socket.destroy();
      else if (connection === 1) {
        (socket as net.Socket & { answered?: boolean }).answered = true;
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst');
      } else socket.end('HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nsecond');
    });
    const posts: number[] = [];
    const acquire = await rawServer((socket, _data, connection) => {
      posts.push(connection);
      socket.destroy();
    });
    const silent = await rawServer(() => undefined);
    const bytewise = await bytewiseServer();
    const dir = path.dirname(socketIn('bun'));
    const sockets = {
      kept: kept.socketPath,
      echo: echo.socketPath,
      resend: resend.socketPath,
      acquire: acquire.socketPath,
      missing: path.join(dir, 'absent.sock'),
      notSocket: fileURLToPath(import.meta.url),
      silent: silent.socketPath,
      bytewise: bytewise.socketPath,
    };
    // The child must end by itself: its kept connections are unref'd.
    const child = await execa(BUN, ['-e', CHILD, JSON.stringify(sockets)], { timeout: 30_000, reject: false });
    expect({ code: child.exitCode, timedOut: child.timedOut, stderr: child.stderr }).toEqual({ code: 0, timedOut: false, stderr: '' });
    expect(JSON.parse(child.stdout)).toEqual({
      bun: 'function',
      kept: [200, 200, 200, 200, 200],
      big: String(300 * 1024),
      resent: ['first', 'second'],
      acquire: { code: 'ECONNRESET', name: 'Error', unreachable: true, message: expect.any(String) as unknown },
      missing: { code: 'ENOENT', name: 'Error', unreachable: true, message: expect.any(String) as unknown },
      notSocket: { code: 'ECONNREFUSED', name: 'Error', unreachable: true, message: expect.any(String) as unknown },
      silent: { code: null, name: 'ExchangeTimeout', unreachable: false, message: 'no answer within 200 ms' },
      bytewise: '{"a":1}',
    });
    expect(kept.connections).toHaveLength(1);
    expect(resend.connections()).toBe(2);
    expect(posts).toEqual([1]);
  });
});
