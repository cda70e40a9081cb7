import net from 'node:net';

/*
 * A connection to the daemon's Unix socket, as one HTTP exchange (client/http1.ts) uses it. On
 * Bun it is Bun's own socket (Bun.connect): Bun's node:net is a JavaScript layer over it that
 * costs a fresh process several milliseconds to load and more on its first connect, which a
 * program on Bun (llxprt) pays on every launch; the bench's rows 10 and 11 measure both. On
 * Node it is node:net, loaded on first use.
 */

/** Where a connection's events go: each exchange sets its own, the idle pool its own. */
export interface WireEvents {
  data(chunk: Buffer): void;
  /** The daemon ended its side. */
  end(): void;
  error(error: Error): void;
  close(): void;
}

export interface Wire {
  events: WireEvents;
  /** `written` runs once the whole text is handed to the system, or with the error that stopped it. */
  write(text: string, written: (error?: Error) => void): void;
  destroy(): void;
  /** Whether the connection keeps the process alive. */
  ref(): void;
  unref(): void;
  /** Not destroyed, not ended, and still writable. */
  readonly usable: boolean;
}

const IGNORED: WireEvents = { data: () => undefined, end: () => undefined, error: () => undefined, close: () => undefined };

function nodeWire(socketPath: string): Wire {
  const socket = net.connect({ path: socketPath });
  const wire: Wire = {
    events: IGNORED,
    write: (text, written) => {
      socket.write(text, (error) => {
        written(error ?? undefined);
      });
    },
    destroy: () => socket.destroy(),
    ref: () => socket.ref(),
    unref: () => socket.unref(),
    get usable() {
      return !socket.destroyed && socket.writable;
    },
  };
  // Always listened to, so an error between two exchanges is never an unhandled 'error' event.
  socket
    .on('data', (chunk: Buffer) => {
      wire.events.data(chunk);
    })
    .on('end', () => {
      wire.events.end();
    })
    .on('error', (error) => {
      wire.events.error(error);
    })
    .on('close', () => {
      wire.events.close();
    });
  return wire;
}

/** The part of Bun's socket API this module uses. */
interface BunSocket {
  write(data: string | Uint8Array): number;
  end(): void;
  ref(): void;
  unref(): void;
}

interface BunSocketHandlers {
  open(socket: BunSocket): void;
  data(socket: BunSocket, chunk: Uint8Array): void;
  drain(socket: BunSocket): void;
  end(socket: BunSocket): void;
  close(socket: BunSocket): void;
  error(socket: BunSocket, error: Error): void;
  connectError(socket: BunSocket, error: Error): void;
}

interface BunApi {
  connect(options: { unix: string; socket: BunSocketHandlers }): Promise<BunSocket>;
}

function bunApi(): BunApi | null {
  const bun = (globalThis as { Bun?: Partial<BunApi> }).Bun;
  return typeof bun?.connect === 'function' ? (bun as BunApi) : null;
}

function bunWire(bun: BunApi, socketPath: string): Wire {
  let socket: BunSocket | null = null;
  let closed = false;
  // Bun may report a failed connect before connectWire returns, before anyone listens: the first
  // write is then told why.
  let failure: Error | null = null;
  let ended = false;
  let referenced = true;
  // Bytes not yet taken by the system, and who waits for them: Bun writes what fits and says how much.
  let pending: Buffer | null = null;
  let onWritten: ((error?: Error) => void) | null = null;

  const flush = (): void => {
    if (socket === null || pending === null) return;
    const sent = socket.write(pending);
    if (sent < 0) return;
    pending = sent >= pending.length ? null : pending.subarray(sent);
    if (pending !== null) return;
    const done = onWritten;
    onWritten = null;
    done?.();
  };
  const fail = (error: Error): void => {
    failure ??= error;
    const done = onWritten;
    onWritten = null;
    pending = null;
    done?.(error);
    wire.events.error(error);
  };
  const shut = (): void => {
    if (closed) return;
    closed = true;
    const done = onWritten;
    onWritten = null;
    done?.(Object.assign(new Error('the connection closed before the request was written'), { code: 'EPIPE' }));
    wire.events.close();
  };

  const wire: Wire = {
    events: IGNORED,
    write: (text, written) => {
      if (closed) {
        written(failure ?? Object.assign(new Error('the connection is closed'), { code: 'EPIPE' }));
        return;
      }
      pending = pending === null ? Buffer.from(text) : Buffer.concat([pending, Buffer.from(text)]);
      onWritten = written;
      flush();
    },
    destroy: () => {
      if (socket !== null) socket.end();
      shut();
    },
    ref: () => {
      referenced = true;
      socket?.ref();
    },
    unref: () => {
      referenced = false;
      socket?.unref();
    },
    get usable() {
      return !closed && !ended;
    },
  };
  bun
    .connect({
      unix: socketPath,
      socket: {
        open: (opened) => {
          socket = opened;
          if (closed) {
            opened.end();
            return;
          }
          if (!referenced) opened.unref();
          flush();
        },
        data: (_socket, chunk) => {
          wire.events.data(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        },
        drain: () => {
          flush();
        },
        end: () => {
          ended = true;
          wire.events.end();
        },
        close: () => {
          shut();
        },
        error: (_socket, error) => {
          fail(error);
        },
        connectError: (_socket, error) => {
          fail(error);
          shut();
        },
      },
    })
    .catch((error: unknown) => {
      if (closed) return;
      fail(error instanceof Error ? error : new Error(String(error)));
      shut();
    });
  return wire;
}

/** Connects to the daemon's socket: failures come as events (`error`, with node's errno `code`, then `close`). */
export function connectWire(socketPath: string): Wire {
  const bun = bunApi();
  return bun === null ? nodeWire(socketPath) : bunWire(bun, socketPath);
}
