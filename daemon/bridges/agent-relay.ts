import { randomBytes } from 'node:crypto';
import { promises as fs, renameSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import type { Logger } from '../os/logger.js';
import { ensureOwnDir, withUmask } from '../os/secure-dir.js';
import type { Bridge } from './bridge.js';
import { BridgeStatus, RELAY_TRANSITIONS } from './bridge-status.js';

export const RELAY_SOCKET_NAME = 'agent.sock';
/** An agent serves a handful of requests per git operation; this caps a runaway container. */
const MAX_RELAY_CONNECTIONS = 128;

export interface AgentRelayOptions {
  id: string;
  /** realpath of the session's SSH_AUTH_SOCK. */
  agentSocket: string;
  /** daemon-generated directory, mounted into containers. */
  dir: string;
  logger: Logger;
}

/** Which inode a path names: a socket re-created or replaced at the same path is another one. */
interface Identity {
  dev: number;
  ino: number;
}

/**
 * The Linux direct-mount bridge (DESIGN §6, last paragraph): a 0666 socket in a 0711 directory
 * inside the 0700 runtime dir, piping each connection to the user's agent. Other host users cannot
 * traverse to it; a container, whatever its uid or user namespace, sees only the mounted directory,
 * read-only. The relay remembers the inode it bound and, at each acquire and on the daemon's sweep,
 * re-creates a socket that is no longer that one (DESIGN §9: a bridge checks its socket).
 */
export class AgentRelay implements Bridge {
  readonly id: string;
  private readonly status: BridgeStatus;
  private server: net.Server | null = null;
  private readonly connections = new Set<net.Socket>();
  private ready: Promise<void> = Promise.resolve();
  /** Listens begun so far: one that a restart or halt overtook leaves the state alone. */
  private launches = 0;
  /** The socket this generation bound; null while none is listening. */
  private bound: Identity | null = null;
  private checking: Promise<void> | null = null;
  private readonly logger: Logger;

  constructor(private readonly options: AgentRelayOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'relay', tunnelId: options.id });
    this.status = new BridgeStatus(RELAY_TRANSITIONS, this.logger);
  }

  get socketPath(): string {
    return path.join(this.options.dir, RELAY_SOCKET_NAME);
  }

  start(): void {
    this.ready = this.listen();
    this.ready.catch(() => undefined);
  }

  /** Every acquire looks at the socket too: one lstat, so a session never gets one it did not bind. */
  async whenReady(): Promise<void> {
    await this.ready;
    await this.check();
  }

  async restart(): Promise<void> {
    this.status.transition('restarting', 'asked to restart');
    await this.closeServer();
    this.start();
    await this.ready;
  }

  /**
   * Re-creates the listener when `agent.sock` is no longer the socket it bound (moved, removed or
   * replaced: containers cannot, their mount is read-only, so this is a bug or the host), and keeps
   * what it found as `lastError`. Concurrent callers share one look.
   */
  check(): Promise<void> {
    this.checking ??= this.compare().finally(() => {
      this.checking = null;
    });
    return this.checking;
  }

  private async compare(): Promise<void> {
    const bound = this.bound;
    if (this.status.state !== 'ready' || bound === null) return;
    const found = await identityOf(this.socketPath);
    if (found !== null && found.dev === bound.dev && found.ino === bound.ino) return;
    // A restart or halt meanwhile made (or dropped) a socket of its own.
    if (this.bound !== bound) return;
    const what = found === null ? 'nothing is there' : `inode ${String(found.ino)} is there, not ${String(bound.ino)}`;
    this.logger.warn({ socket: this.socketPath, found, bound }, 'relay socket is not the one it bound; re-creating it');
    await this.restart();
    this.status.lastError = new Error(`${this.socketPath} is not the socket it bound (${what}); re-created it`);
  }

  /** A second halt (a bridge removed while its acquire fails) finds the relay stopped already. */
  async halt(): Promise<void> {
    if (this.status.state === 'stopped') return;
    this.status.transition('stopped', 'halted');
    await this.closeServer();
    await fs.rm(this.options.dir, { recursive: true, force: true });
    this.logger.info('relay halted');
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'relay',
      connection: null,
      hostAgentSocket: this.options.agentSocket,
      socketPath: this.socketPath,
      pid: null,
      ...this.status.fields(refs),
    };
  }

  /**
   * Each listen binds a name of its own and renames it to `agent.sock`: closing a server unlinks
   * the name it bound, so a listen that a restart or halt overtook closes its server without
   * removing the socket a newer listen put in place.
   */
  private async listen(): Promise<void> {
    this.launches += 1;
    const launch = this.launches;
    const overtaken = (): boolean => launch !== this.launches || this.status.state === 'stopped';
    // Shorter than agent.sock, so a relay directory that fits one fits the other.
    const own = path.join(this.options.dir, `.${randomBytes(4).toString('hex')}`);
    let server: net.Server | null = null;
    try {
      await ensureOwnDir(this.options.dir, 0o711);
      server = net.createServer((client) => {
        this.pipe(client);
      });
      server.maxConnections = MAX_RELAY_CONNECTIONS;
      await listenAt(server, own);
      server.on('error', (error) => {
        this.status.lastError = error;
        this.logger.warn({ err: error }, 'relay listener error');
      });
      // The rename keeps the inode.
      const bound = await identityOf(own);
      if (overtaken()) {
        await closeQuietly(server);
        return;
      }
      // Nothing awaited from the look above to here: a newer listen can only rename over this one.
      renameSync(own, this.socketPath);
      this.server = server;
      this.bound = bound;
      this.status.transition('ready', 'listening');
      this.logger.info({ socket: this.socketPath }, 'relay ready');
    } catch (error) {
      if (server !== null) await closeQuietly(server);
      this.status.lastError = error as Error;
      this.logger.error({ err: error }, 'relay failed to listen');
      if (!overtaken()) this.status.transition('failed', (error as Error).message);
      throw error;
    }
  }

  private pipe(client: net.Socket): void {
    const upstream = net.connect(this.options.agentSocket);
    this.connections.add(client);
    this.connections.add(upstream);
    const finish = (error?: Error): void => {
      if (error !== undefined) {
        this.status.lastError = new Error(`agent ${this.options.agentSocket}: ${error.message}`);
        this.logger.warn({ err: error }, 'relay connection failed');
      }
      client.destroy();
      upstream.destroy();
      this.connections.delete(client);
      this.connections.delete(upstream);
    };
    client.on('error', finish);
    upstream.on('error', finish);
    client.on('close', () => {
      finish();
    });
    upstream.on('close', () => {
      finish();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  }

  private async closeServer(): Promise<void> {
    const server = this.server;
    this.server = null;
    this.bound = null;
    for (const socket of this.connections) socket.destroy();
    this.connections.clear();
    if (server !== null) await closeQuietly(server);
  }
}

function listenAt(server: net.Server, socket: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    withUmask(0o111, () => server.listen(socket, () => {
      server.off('error', reject);
      resolve();
    }));
  });
}

/** Closing a server that never listened reports an error there is nothing to do about. */
function closeQuietly(server: net.Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => {
    resolve();
  }));
}

async function identityOf(file: string): Promise<Identity | null> {
  const stat = await fs.lstat(file).catch(() => null);
  return stat === null ? null : { dev: stat.dev, ino: stat.ino };
}
