import { promises as fs } from 'node:fs';
import net from 'node:net';
import type { Logger } from '../os/logger.js';
import { withUmask } from '../os/secure-dir.js';
import { SESSION_MAX_OPEN, SESSION_RATE_PER_SECOND, TokenBucket, type UpstreamGate } from './bounds.js';

/** Which inode a path names: a socket re-created or replaced at the same path is another one. */
interface Identity {
  dev: number;
  ino: number;
}

export interface SessionEndpointOptions {
  /** Where it listens: in the session's own directory (a container mounts it) or the daemon's (a tunnel's ssh connects). */
  socketPath: string;
  /**
   * The host socket each connection is piped to, connected per connection: what is not there yet
   * is served once it is.
   */
  upstream: string;
  /** The bound toward `upstream` that every session's socket shares. */
  gate: UpstreamGate;
  /** Monotonic ms, for the rate bound. */
  monotonic(): number;
  /** The umask it binds under: 0o111 gives 0666 (any container user), 0o177 0600 (this user's ssh only). */
  umask: number;
  logger: Logger;
  /** A connection to the upstream failed: the bridge keeps it as its last error. */
  onUpstreamError(error: Error): void;
}

/**
 * One session's socket for one host socket (DESIGN §9: each session's agent is its own): it pipes
 * each connection to the upstream while the session is within its bounds (SESSION_MAX_OPEN at
 * once, SESSION_RATE_PER_SECOND, and the upstream's shared gate), and closes any other at once,
 * counting it. Closing the endpoint closes every connection it serves: a container whose session
 * ended keeps nothing open to the agent.
 */
export class SessionEndpoint {
  /** Connections refused by a bound, since the endpoint was made. */
  refused = 0;
  private server: net.Server | null = null;
  private bound: Identity | null = null;
  private served = 0;
  private readonly sockets = new Set<net.Socket>();
  private readonly bucket: TokenBucket;

  constructor(private readonly options: SessionEndpointOptions) {
    this.bucket = new TokenBucket(SESSION_RATE_PER_SECOND, SESSION_RATE_PER_SECOND, () => options.monotonic());
  }

  get socketPath(): string {
    return this.options.socketPath;
  }

  get upstream(): string {
    return this.options.upstream;
  }

  /** Connections served now. */
  get open(): number {
    return this.served;
  }

  get listening(): boolean {
    return this.server !== null;
  }

  /**
   * Binds the socket path. Whatever is at that name is removed first: only the daemon writes the
   * directory (containers mount it read-only), and a socket an earlier listener left (a daemon that
   * stopped) would make the bind fail. The directory itself is never made anew: a running
   * container's mount names its inode.
   */
  async listen(): Promise<void> {
    if (this.server !== null) return;
    await fs.rm(this.options.socketPath, { force: true });
    const server = net.createServer((client) => {
      this.accept(client);
    });
    await listenAt(server, this.options.socketPath, this.options.umask);
    server.on('error', (error) => {
      this.options.logger.warn({ err: error, socket: this.options.socketPath }, 'session socket listener error');
    });
    this.bound = await identityOf(this.options.socketPath);
    this.server = server;
  }

  /** Stops listening (the socket file goes) and ends every connection it serves. */
  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    this.bound = null;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    if (server !== null) await new Promise<void>((resolve) => server.close(() => {
      resolve();
    }));
  }

  /** Whether the path still names the socket it bound (it cannot be moved from a container: the mount is read-only). */
  async intact(): Promise<boolean> {
    const bound = this.bound;
    if (bound === null) return true;
    const found = await identityOf(this.options.socketPath);
    return this.bound !== bound || (found !== null && found.dev === bound.dev && found.ino === bound.ino);
  }

  private accept(client: net.Socket): void {
    client.on('error', () => undefined);
    // The session's own bounds first: a session at them takes nothing from the shared gate.
    if (this.served >= SESSION_MAX_OPEN || !this.bucket.take() || !this.options.gate.take()) {
      this.refused += 1;
      client.destroy();
      return;
    }
    this.served += 1;
    const upstream = net.connect(this.options.upstream);
    this.sockets.add(client);
    this.sockets.add(upstream);
    let finished = false;
    const finish = (error?: Error): void => {
      if (finished) return;
      finished = true;
      this.served -= 1;
      this.options.gate.give();
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
      if (error !== undefined) this.options.onUpstreamError(error);
    };
    upstream.on('error', (error) => {
      finish(new Error(`${this.options.upstream}: ${error.message}`));
    });
    client.on('close', () => {
      finish();
    });
    upstream.on('close', () => {
      finish();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

function listenAt(server: net.Server, socket: string, umask: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    withUmask(umask, () => server.listen(socket, () => {
      server.off('error', reject);
      resolve();
    }));
  });
}

async function identityOf(file: string): Promise<Identity | null> {
  const stat = await fs.lstat(file).catch(() => null);
  return stat === null ? null : { dev: stat.dev, ino: stat.ino };
}
