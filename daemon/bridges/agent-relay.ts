import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import { assertSocketPathFits } from '../../shared/paths.js';
import type { Logger } from '../os/logger.js';
import { ensureOwnDir } from '../os/secure-dir.js';
import type { UpstreamGate } from './bounds.js';
import type { Bridge } from './bridge.js';
import { BridgeStatus, RELAY_TRANSITIONS } from './bridge-status.js';
import { SessionEndpoint } from './session-endpoint.js';

export const RELAY_SOCKET_NAME = 'agent.sock';
/** Per-session directory names: 64 random bits, in hex. */
const DIR_NAME = /^[0-9a-f]{16}$/;
/** Sockets the sweep looks at each time: a thousand sessions cost a few lstats a sweep, not a thousand. */
const CHECKS_PER_SWEEP = 64;

export interface AgentRelayOptions {
  id: string;
  /** realpath of the host socket served (the session's SSH_AUTH_SOCK, or an extra socket). */
  agentSocket: string;
  /** Daemon-owned: each session's directory is made in it. */
  agentsDir: string;
  /** The bound toward the host socket that every session's socket shares, through any bridge. */
  gate: UpstreamGate;
  /** The upstream is the daemon's own server: each session's socket names itself first (session-endpoint.ts). */
  announce?: boolean;
  monotonic(): number;
  logger: Logger;
}

/** A session's socket on the relay, in a directory of its own that its container mounts. */
export interface RelayEndpoint {
  /** The directory the container mounts (read-only); the socket is `agent.sock` in it. */
  dir: string;
  endpoint: SessionEndpoint;
}

export function newEndpointDirName(): string {
  return randomBytes(8).toString('hex');
}

/**
 * The Linux direct-mount bridge (DESIGN §6, last paragraph), one per host socket: each session
 * gets its own 0666 socket in its own 0711 directory inside the 0700 runtime dir, made at acquire
 * and closed at release, so a container whose session ended cannot reach the agent and no session
 * shares a socket with another. Every session's socket pipes to the same host socket, under one
 * bound toward it (`UpstreamGate`). The sweep looks at a few sockets each time and re-creates one
 * that is no longer the socket it bound (DESIGN §9: a bridge checks its socket).
 */
export class AgentRelay implements Bridge {
  readonly id: string;
  private readonly status: BridgeStatus;
  private readonly endpoints = new Map<SessionEndpoint, string>();
  /** Connections refused on sockets already closed, so the bridge's count only grows. */
  private refusedBefore = 0;
  private cursor = 0;
  private checking: Promise<void> | null = null;
  private readonly logger: Logger;
  /**
   * One session socket made ahead, in its own directory, so an acquire does not wait for the
   * directory, the bind and their checks: no session has it (nothing mounts it) until one takes it.
   */
  private spare: Promise<RelayEndpoint> | null = null;

  constructor(private readonly options: AgentRelayOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'relay', tunnelId: options.id });
    this.status = new BridgeStatus(RELAY_TRANSITIONS, this.logger);
  }

  start(): void {
    this.status.transition('ready', 'serves session sockets');
  }

  whenReady(): Promise<void> {
    return this.status.state === 'stopped' ? Promise.reject(new Error(`relay ${this.id} is stopped`)) : Promise.resolve();
  }

  /**
   * A session's socket: the spare, or a new directory, or `dirName` when a next daemon serves
   * again the directory a running container mounts (its socket is bound anew, the directory kept).
   * The next spare is made by makeSpare(), once the acquire has its answer.
   */
  async open(dirName?: string): Promise<RelayEndpoint> {
    let opened: RelayEndpoint | null = null;
    if (dirName === undefined) {
      const spare = this.spare;
      this.spare = null;
      opened = spare === null ? null : await spare.catch(() => null);
    }
    opened ??= await this.make(dirName ?? newEndpointDirName());
    this.endpoints.set(opened.endpoint, opened.dir);
    return opened;
  }

  private async make(dirName: string): Promise<RelayEndpoint> {
    if (!DIR_NAME.test(dirName)) throw new Error(`not a session directory name: ${dirName}`);
    const dir = path.join(this.options.agentsDir, dirName);
    const socketPath = path.join(dir, RELAY_SOCKET_NAME);
    assertSocketPathFits(socketPath, 'linux');
    await ensureOwnDir(dir, 0o711);
    const endpoint = new SessionEndpoint({
      socketPath,
      upstream: this.options.agentSocket,
      announce: this.options.announce,
      gate: this.options.gate,
      monotonic: () => this.options.monotonic(),
      umask: 0o111,
      logger: this.logger,
      onUpstreamError: (error) => {
        this.status.lastError = new Error(`agent ${error.message}`);
        this.logger.warn({ err: error }, 'relay connection failed');
      },
    });
    await endpoint.listen();
    return { dir, endpoint };
  }

  /**
   * At most one spare, made until the relay stops: called once a session was added, so its
   * directory and bind are not on that acquire's path.
   */
  makeSpare(): void {
    if (this.spare !== null || this.status.state === 'stopped') return;
    const made = this.make(newEndpointDirName());
    this.spare = made;
    made.catch((error: unknown) => {
      if (this.spare === made) this.spare = null;
      this.logger.warn({ err: error }, 'cannot make a spare session socket');
    });
  }

  /** A socket no session took: it stops, and its directory goes. */
  private async discard(opened: RelayEndpoint): Promise<void> {
    await opened.endpoint.close();
    await fs.rm(opened.dir, { recursive: true, force: true });
  }

  /**
   * The session ended: its socket goes at once with every connection on it, and its directory
   * too unless `keep` (the daemon stops and the next one serves it again).
   */
  async close(opened: RelayEndpoint, keep: boolean): Promise<void> {
    this.endpoints.delete(opened.endpoint);
    this.refusedBefore += opened.endpoint.refused;
    await opened.endpoint.close();
    if (!keep) await fs.rm(opened.dir, { recursive: true, force: true });
  }

  /** The session directories it serves now. */
  dirs(): string[] {
    return [...this.endpoints.values()];
  }

  /** Binds every session's socket anew in the same directories: containers keep their mount. */
  async restart(): Promise<void> {
    this.status.transition('restarting', 'asked to restart');
    await Promise.all([...this.endpoints.keys()].map(async (endpoint) => {
      await endpoint.close();
      await endpoint.listen();
    }));
    this.status.transition('ready', 'listening again');
  }

  /**
   * Re-creates a session's socket that is no longer the one it bound (moved, removed or
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
    if (!this.ready()) return;
    const all = [...this.endpoints.keys()];
    if (all.length === 0) return;
    const start = this.cursor % all.length;
    const some = [...all.slice(start), ...all.slice(0, start)].slice(0, CHECKS_PER_SWEEP);
    this.cursor = start + some.length;
    for (const endpoint of some) {
      if (await endpoint.intact()) continue;
      // Closed meanwhile (its session ended) or already being re-created.
      if (!this.endpoints.has(endpoint) || !this.ready()) continue;
      this.logger.warn({ socket: endpoint.socketPath }, 'session socket is not the one it bound; re-creating it');
      this.status.transition('restarting', 'a session socket was replaced');
      await endpoint.close();
      await endpoint.listen().catch((error: unknown) => {
        this.logger.error({ err: error, socket: endpoint.socketPath }, 'cannot re-create a session socket');
      });
      this.status.lastError = new Error(`${endpoint.socketPath} is not the socket it bound; re-created it`);
      this.status.transition('ready', 'listening again');
    }
  }

  /** A method: TypeScript would keep the state narrowed across the awaits of a check. */
  private ready(): boolean {
    return this.status.state === 'ready';
  }

  /** A second halt (a bridge removed while its acquire fails) finds the relay stopped already. */
  async halt(): Promise<void> {
    if (this.status.state === 'stopped') return;
    this.status.transition('stopped', 'halted');
    const spare = this.spare;
    this.spare = null;
    const unused = spare === null ? null : await spare.catch(() => null);
    if (unused !== null) await this.discard(unused);
    // The sessions still holding it lose their agent now; their directories go when they end.
    await Promise.all([...this.endpoints.keys()].map((endpoint) => endpoint.close()));
    this.logger.info('relay halted');
  }

  describe(refs: number): BridgeInfo {
    let refused = this.refusedBefore;
    for (const endpoint of this.endpoints.keys()) refused += endpoint.refused;
    return {
      id: this.id,
      kind: 'relay',
      connection: null,
      hostAgentSocket: this.options.agentSocket,
      socketPath: path.join(this.options.agentsDir, '*', RELAY_SOCKET_NAME),
      pid: null,
      endpoints: this.endpoints.size,
      open: this.options.gate.open,
      refused,
      ...this.status.fields(refs),
    };
  }
}
