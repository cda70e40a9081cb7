import { promises as fs } from 'node:fs';
import net from 'node:net';
import { TokenBucket } from '../bridges/bounds.js';
import type { Logger } from '../os/logger.js';
import { withUmask } from '../os/secure-dir.js';
import { MAX_REQUEST_BYTES, parseRequest, renderAnswer, type CredentialQuery } from './credential-request.js';
import type { FillContext, FillResult } from './host-fill.js';

/**
 * Answers a session may have in a burst, and how many a minute after it: git asks once per command
 * that authenticates (a fetch, a push, a few for submodules), so a session asking faster is
 * looping over the user's helpers, each answer a host git and a helper run (a keychain look-up, a
 * network call for `gh` or Git Credential Manager).
 */
export const CREDENTIAL_BURST = 10;
export const CREDENTIAL_PER_MINUTE = 10;
/** A request not sent whole by then is given up on: git sends it at once. */
const READ_TIMEOUT_MS = 10_000;
/** The line the session's own socket sends first: its path, which no container can write. */
const MAX_PREAMBLE_BYTES = 4200;

/** What a session may ask for, and how its host git runs. */
export interface CredentialSession {
  sessionId: string;
  /** Normalised hosts (shared/git-credential-hosts.ts). */
  hosts: readonly string[];
  fill: FillContext;
  /** A previous daemon's session whose socket is served until its client renews (logged as such). */
  kept?: true;
}

/** How a session's host git runs: the daemon's user's HOME, the client's PATH and XDG_CONFIG_HOME. */
export function fillContext(hostHome: string, client: { path: string; xdgConfigHome?: string | undefined }): FillContext {
  return { hostHome, path: client.path, ...(client.xdgConfigHome === undefined ? {} : { xdgConfigHome: client.xdgConfigHome }) };
}

interface Registered {
  session: CredentialSession;
  hosts: ReadonlySet<string>;
  bucket: TokenBucket;
}

export interface CredentialServerOptions {
  /** Daemon-private (in the 0700 runtime dir): only the sessions' own sockets connect to it. */
  socketPath: string;
  fill(context: FillContext, query: CredentialQuery): Promise<FillResult>;
  monotonic(): number;
  logger: Logger;
}

/**
 * The daemon's end of the sandboxes' credential helper (DESIGN §8, HTTPS credentials). Each
 * session's own socket (the relay's or a tunnel's, bridges/session-endpoint.ts) connects here and
 * first sends its own path, so a request is known to be that session's whatever the container
 * writes after it. Only `get` for a host the session named is answered, by the user's host git;
 * `store` and `erase` are dropped unread, so no sandbox ever changes what the user's helpers hold.
 * Every outcome is logged with the session, host and username, never the secret.
 */
export class CredentialServer {
  private server: net.Server | null = null;
  private readonly sessions = new Map<string, Registered>();
  private readonly sockets = new Set<net.Socket>();
  private readonly logger: Logger;

  constructor(private readonly options: CredentialServerOptions) {
    this.logger = options.logger.child({ module: 'git-credential' });
  }

  get socketPath(): string {
    return this.options.socketPath;
  }

  /** Listens once; what an earlier daemon left at the path is removed first (the runtime dir is the daemon's). */
  async listen(): Promise<void> {
    if (this.server !== null) return;
    const server = net.createServer({ allowHalfOpen: true }, (socket) => {
      this.accept(socket);
    });
    this.server = server;
    await fs.rm(this.options.socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      withUmask(0o177, () => server.listen(this.options.socketPath, () => {
        server.off('error', reject);
        resolve();
      }));
    }).catch((error: unknown) => {
      this.server = null;
      throw error;
    });
    server.on('error', (error) => {
      this.logger.warn({ err: error }, 'credential listener error');
    });
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const socket of this.sockets) socket.destroy();
    if (server !== null) await new Promise<void>((resolve) => server.close(() => {
      resolve();
    }));
  }

  /**
   * The session whose own socket is `endpoint` may ask for its hosts from now on; the returned
   * function ends that (the session ended).
   */
  register(endpoint: string, session: CredentialSession): () => void {
    const registered: Registered = {
      session,
      hosts: new Set(session.hosts),
      bucket: new TokenBucket(CREDENTIAL_PER_MINUTE / 60, CREDENTIAL_BURST, () => this.options.monotonic()),
    };
    this.sessions.set(endpoint, registered);
    return () => {
      if (this.sessions.get(endpoint) === registered) this.sessions.delete(endpoint);
    };
  }

  private accept(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => this.sockets.delete(socket));
    socket.setTimeout(READ_TIMEOUT_MS, () => socket.destroy());
    let received = Buffer.alloc(0);
    let decided = false;
    socket.on('data', (chunk: Buffer) => {
      if (decided) return;
      received = Buffer.concat([received, chunk]);
      const early = this.early(received);
      if (early !== null) {
        decided = true;
        this.drop(socket, early);
      }
    });
    socket.on('end', () => {
      if (decided) return;
      decided = true;
      void this.answer(received.toString('utf8')).then((text) => {
        socket.end(text);
      }, (error: unknown) => {
        this.logger.error({ err: error }, 'cannot answer a credential request');
        socket.destroy();
      });
    });
  }

  /**
   * A request refused before it ends: too long, or anything but a `get` (a `store` or `erase`
   * carries the sandbox's secret, which is never read further than its action).
   */
  private early(received: Buffer): { endpoint: string | null; reason: string; level: 'debug' | 'warn' } | null {
    const preambleEnd = received.indexOf(0x0a);
    if (preambleEnd === -1) return received.length > MAX_PREAMBLE_BYTES ? { endpoint: null, reason: 'no session socket named itself', level: 'warn' } : null;
    const endpoint = received.subarray(0, preambleEnd).toString('utf8');
    const rest = received.subarray(preambleEnd + 1);
    if (rest.length > MAX_REQUEST_BYTES) return { endpoint, reason: `the request is longer than ${String(MAX_REQUEST_BYTES)} bytes`, level: 'warn' };
    const firstEnd = rest.indexOf(0x0a);
    if (firstEnd === -1) return null;
    const first = rest.subarray(0, firstEnd).toString('utf8');
    if (first === 'action=get') return null;
    const action = first.startsWith('action=') ? first.slice('action='.length, 'action='.length + 20) : '(none)';
    return { endpoint, reason: `${action} is not answered (only get is)`, level: action === 'store' || action === 'erase' ? 'debug' : 'warn' };
  }

  private drop(socket: net.Socket, why: { endpoint: string | null; reason: string; level: 'debug' | 'warn' }): void {
    const sessionId = why.endpoint === null ? null : (this.sessions.get(why.endpoint)?.session.sessionId ?? null);
    this.logger[why.level]({ sessionId, outcome: 'dropped', reason: why.reason }, 'credential request dropped');
    socket.end();
  }

  /** The answer to a whole request: the credential, or nothing (git then tries its next helper or gives up). */
  private async answer(text: string): Promise<string> {
    const newline = text.indexOf('\n');
    const endpoint = newline === -1 ? '' : text.slice(0, newline);
    const registered = this.sessions.get(endpoint);
    if (registered === undefined) {
      this.logger.warn({ outcome: 'refused', reason: 'no session holds this socket now (it ended, or awaits its renewal after a restart)' }, 'credential request refused');
      return '';
    }
    const { sessionId } = registered.session;
    const kept = registered.session.kept === true ? { kept: true } : {};
    const parsed = parseRequest(text.slice(newline + 1), registered.hosts);
    if (!parsed.ok) {
      this.logger.warn({ sessionId, ...kept, outcome: 'refused', reason: parsed.reason }, 'credential request refused');
      return '';
    }
    const { host } = parsed.query;
    if (!registered.bucket.take()) {
      this.logger.warn({ sessionId, ...kept, host, outcome: 'refused', reason: `more than ${String(CREDENTIAL_BURST)} requests at once or ${String(CREDENTIAL_PER_MINUTE)} a minute` }, 'credential request refused');
      return '';
    }
    const result = await this.options.fill(registered.session.fill, parsed.query);
    if (!result.ok) {
      this.logger.warn({ sessionId, ...kept, host, username: parsed.query.username ?? null, outcome: 'failed', reason: result.reason }, 'credential request not answered');
      return '';
    }
    this.logger.info({ sessionId, ...kept, host, username: result.answer.username, outcome: 'answered' }, 'credential answered');
    return renderAnswer(result.answer);
  }
}
