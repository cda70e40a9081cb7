import { connectWire, type Wire, type WireEvents } from './wire.js';

/*
 * One HTTP/1.1 exchange over the daemon's Unix socket, on a bare connection (client/wire.ts: Bun's
 * own socket on Bun, node's `net` elsewhere). It is kept because
 * it still pays against node:http with a kept-alive agent: loading that client (agent, parser,
 * request and response streams) and sending through it costs a fresh process noticeably more, on
 * Node 24 with its compile cache and on Bun, and each request on a kept connection takes longer
 * too. The bench's transport rows (11, alone with `npm run bench -- --transport`) measure both
 * side by side on every runtime; when they stop differing, node:http can take this module's
 * place. The daemon is fastify on node's own HTTP server and frames every answer by
 * Content-Length, so the client reads only that part of HTTP/1.1: a status line, headers, and a
 * body framed by Content-Length or by the end of the connection.
 */

export interface Exchange {
  socketPath: string;
  method: string;
  path: string;
  /** Lower-case names; `host` and `content-length` are added. */
  headers: Record<string, string>;
  body?: string | undefined;
  /** The whole exchange, connect included; past it the socket is destroyed. */
  timeoutMs: number;
  /** Keep the connection for the next exchange with the same socket (default true). */
  keepAlive?: boolean;
  /** Called once the request is written: the caller may start work it needs only for the answer. */
  onSent?: () => void;
  /**
   * Whether sending the request twice does no more than sending it once (default: only GET). Only
   * such a request goes over a kept connection: one that dies may have delivered the request
   * before it died, so the request is sent again on a new one, and a second acquire would make a
   * second session. Any other request opens a connection of its own.
   */
  idempotent?: boolean;
}

export interface Reply {
  status: number;
  /** Lower-case names; a repeated header keeps its first value. */
  headers: Map<string, string>;
  body: Buffer;
}

/** The exchange did not finish in time. */
export class ExchangeTimeout extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
  }
}

/** The daemon answered something that is not an HTTP/1.1 response. */
export class MalformedReply extends Error {}

/** Far above any answer the daemon gives (1000 sessions listed are about 1 MB). */
const MAX_HEAD_BYTES = 64 * 1024;
const MAX_BODY_BYTES = 64 * 1024 * 1024;
/** Idle connections kept per socket path: a client's heartbeats and its next acquire. */
const MAX_IDLE = 2;

const idle = new Map<string, Wire[]>();

function dropIdle(socketPath: string, wire: Wire): void {
  const wires = idle.get(socketPath);
  if (wires === undefined) return;
  const at = wires.indexOf(wire);
  if (at >= 0) wires.splice(at, 1);
  if (wires.length === 0) idle.delete(socketPath);
}

/** An idle connection never holds the process open, and one the daemon closes leaves the pool. */
function park(socketPath: string, wire: Wire): void {
  const wires = idle.get(socketPath) ?? [];
  if (wires.length >= MAX_IDLE) {
    wire.destroy();
    return;
  }
  const gone = (): void => {
    dropIdle(socketPath, wire);
    wire.destroy();
  };
  wire.events = { data: gone, end: gone, error: gone, close: gone };
  wire.unref();
  wires.push(wire);
  idle.set(socketPath, wires);
}

function takeIdle(socketPath: string): Wire | null {
  const wire = idle.get(socketPath)?.shift() ?? null;
  if (wire === null) return null;
  if (idle.get(socketPath)?.length === 0) idle.delete(socketPath);
  wire.ref();
  return wire.usable ? wire : null;
}

/** Accumulates a response; `done` once the body is complete. */
class ReplyReader {
  private buffer: Buffer = Buffer.alloc(0);
  private head: { status: number; headers: Map<string, string>; bodyStart: number } | null = null;
  received = false;

  /** The complete reply (and whether bytes followed it), or null while more is needed. */
  feed(chunk: Buffer): { reply: Reply; trailing: boolean } | null {
    this.received = true;
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    if (this.head === null) {
      const end = this.buffer.indexOf('\r\n\r\n');
      if (end < 0) {
        if (this.buffer.length > MAX_HEAD_BYTES) throw new MalformedReply(`response headers over ${MAX_HEAD_BYTES} bytes`);
        return null;
      }
      this.head = parseHead(this.buffer.subarray(0, end).toString('latin1'), end + 4);
    }
    return this.body(false);
  }

  /** The connection ended: a body framed by the end of the connection is complete now. */
  finish(): Reply | null {
    return this.head === null ? null : (this.body(true)?.reply ?? null);
  }

  private body(ended: boolean): { reply: Reply; trailing: boolean } | null {
    const head = this.head;
    if (head === null) return null;
    const rest = this.buffer.subarray(head.bodyStart);
    if (rest.length > MAX_BODY_BYTES) throw new MalformedReply(`response body over ${MAX_BODY_BYTES} bytes`);
    const reply = (body: Buffer, used: number) => ({ reply: { status: head.status, headers: head.headers, body }, trailing: used < rest.length });
    // 204 and 304 have no body whatever their headers say.
    if (head.status === 204 || head.status === 304) return reply(Buffer.alloc(0), 0);
    const coding = head.headers.get('transfer-encoding');
    if (coding !== undefined) throw new MalformedReply(`a body sent with transfer-encoding ${JSON.stringify(coding)}, not framed by content-length`);
    const length = head.headers.get('content-length');
    if (length !== undefined) {
      if (!/^\d+$/.test(length)) throw new MalformedReply(`bad content-length ${JSON.stringify(length)}`);
      const size = Number(length);
      return rest.length >= size ? reply(rest.subarray(0, size), size) : null;
    }
    return ended ? reply(rest, rest.length) : null;
  }
}

/** A reply framed as the daemon frames its answers: what primeReader reads. */
const SAMPLE_REPLY = 'HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\n{}';
let readerPrimed = false;

/**
 * Reads a sample reply once per process, the result dropped: the engine compiles the reader on
 * its first run, which a fresh process would otherwise pay after the daemon's answer arrived
 * rather than while the daemon works on it.
 */
function primeReader(): void {
  if (readerPrimed) return;
  readerPrimed = true;
  new ReplyReader().feed(Buffer.from(SAMPLE_REPLY, 'latin1'));
}

function parseHead(text: string, bodyStart: number): { status: number; headers: Map<string, string>; bodyStart: number } {
  const [statusLine = '', ...lines] = text.split('\r\n');
  const match = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine);
  if (match === null) throw new MalformedReply(`not an HTTP/1.1 status line: ${JSON.stringify(statusLine.slice(0, 80))}`);
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new MalformedReply(`bad header line ${JSON.stringify(line.slice(0, 80))}`);
    const name = line.slice(0, colon).trim().toLowerCase();
    if (!headers.has(name)) headers.set(name, line.slice(colon + 1).trim());
  }
  return { status: Number(match[1]), headers, bodyStart };
}

function requestText(exchange: Exchange, keepAlive: boolean): string {
  const headers: Record<string, string> = {
    host: 'localhost',
    ...exchange.headers,
    ...(keepAlive ? {} : { connection: 'close' }),
    ...(exchange.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(exchange.body)) }),
  };
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}`);
  return `${exchange.method} ${exchange.path} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n${exchange.body ?? ''}`;
}

/** Error codes of a connection that the daemon closed under a reused, idle-looking socket. */
const STALE = new Set(['ECONNRESET', 'EPIPE']);

class StaleConnection extends Error {}

function exchangeOn(wire: Wire, exchange: Exchange, keepAlive: boolean, reused: boolean, deadline: number): Promise<Reply> {
  return new Promise<Reply>((resolve, reject) => {
    const reader = new ReplyReader();
    let settled = false;
    const settle = (outcome: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outcome();
    };
    const timer = setTimeout(() => {
      settle(() => {
        wire.destroy();
        reject(new ExchangeTimeout(exchange.timeoutMs));
      });
    }, Math.max(0, deadline - Date.now()));
    const fail = (error: Error): void => {
      settle(() => {
        wire.destroy();
        // A kept connection the daemon had closed before this request reached it: try a new one.
        reject(reused && !reader.received ? new StaleConnection(error.message) : error);
      });
    };
    const events: WireEvents = {
      data: (chunk) => {
        let done: { reply: Reply; trailing: boolean } | null;
        try {
          done = reader.feed(chunk);
        } catch (error) {
          fail(error as Error);
          return;
        }
        if (done === null) return;
        const { reply, trailing } = done;
        settle(() => {
          const closing = !keepAlive || trailing || reply.headers.get('connection')?.toLowerCase() === 'close';
          if (closing) wire.destroy();
          else park(exchange.socketPath, wire);
          resolve(reply);
        });
      },
      end: () => {
        const reply = reader.finish();
        if (reply !== null) {
          settle(() => {
            wire.destroy();
            resolve(reply);
          });
        } else fail(Object.assign(new Error('the daemon closed the connection before answering'), { code: 'ECONNRESET' }));
      },
      error: fail,
      close: () => {
        fail(Object.assign(new Error('the connection closed before an answer'), { code: 'ECONNRESET' }));
      },
    };
    wire.events = events;
    wire.write(requestText(exchange, keepAlive), (error) => {
      if (error !== undefined) fail(error);
      else {
        primeReader();
        exchange.onSent?.();
      }
    });
  });
}

/**
 * Sends the request and resolves with the whole response. Connection failures reject with node's
 * errno error (ENOENT, ECONNREFUSED…); a kept connection that turns out closed before any answer
 * is replaced once, which only an idempotent request is ever sent on.
 */
export async function exchange(request: Exchange): Promise<Reply> {
  const keepAlive = request.keepAlive ?? true;
  const deadline = Date.now() + request.timeoutMs;
  const kept = keepAlive && (request.idempotent ?? request.method === 'GET') ? takeIdle(request.socketPath) : null;
  if (kept !== null) {
    try {
      return await exchangeOn(kept, request, keepAlive, true, deadline);
    } catch (error) {
      if (!(error instanceof StaleConnection)) throw error;
    }
  }
  return exchangeOn(connectWire(request.socketPath), request, keepAlive, false, deadline);
}

/** Whether an error from `exchange` means nothing answers on the socket. */
export function unreachable(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code !== undefined && (STALE.has(code) || ['ENOENT', 'ECONNREFUSED', 'ENOTSOCK'].includes(code));
}
