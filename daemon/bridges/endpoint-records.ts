import path from 'node:path';
import * as z from 'zod/mini';
import { AbsolutePath, ExecText, Id } from '../../shared/contracts/common.js';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { GitCredentialHosts } from '../../shared/contracts/sessions.js';
import { writeFileAtomic } from '../os/files.js';
import type { Logger } from '../os/logger.js';
import { readStateFile } from '../os/state-file.js';
import { HelperRecord } from './helper-records.js';

/** Names a daemon made: 64 random bits in hex. */
const Token = z.string().check(z.regex(/^[0-9a-f]{16}$/));
/** Null for the agent, else the name of one of the session's extra sockets. */
const SocketName = z.nullable(z.string().check(z.regex(/^[a-z][a-z0-9-]{0,31}$/)));

/**
 * What a session's git credential socket answers (`--git-credentials`), so the next daemon answers
 * the same until the client renews: the hosts the session named, and how its host git runs (the
 * client's PATH and XDG_CONFIG_HOME; HOME is the daemon's user's). Checked as an acquire's are: a
 * record can name no host an acquire could not.
 */
export const KeptCredentials = z.strictObject({
  hosts: GitCredentialHosts.check(z.minLength(1)),
  path: ExecText(65536),
  xdgConfigHome: z.optional(ExecText(4096)),
});
export type KeptCredentials = z.infer<typeof KeptCredentials>;

/** A session's socket on the local relay: `agents/<dir>/agent.sock`, serving `upstream`. */
const RelayEndpoint = z.strictObject({
  kind: z.literal('relay'),
  name: SocketName,
  upstream: AbsolutePath,
  dir: Token,
  credentials: z.optional(KeptCredentials),
});

/** How a tunnel logs in: the connection as discovered (a connection's name alone may since mean another). */
const KeptConnection = z.strictObject({
  name: z.string().check(z.minLength(1), z.maxLength(200)),
  uri: z.string().check(z.startsWith('ssh://'), z.maxLength(4096)),
  identity: z.nullable(AbsolutePath),
  isMachine: z.boolean(),
});
export type KeptConnection = z.infer<typeof KeptConnection>;

/** A session's socket through a tunnel: `<tunnel dir in the VM>/<slot>/agent.sock`, forwarded to `upstream`. */
const TunnelEndpoint = z.strictObject({
  kind: z.literal('tunnel'),
  name: SocketName,
  upstream: AbsolutePath,
  slot: Token,
  connection: KeptConnection,
  credentials: z.optional(KeptCredentials),
});

/**
 * A session's relay container in a Docker engine's VM, and what reaches that engine and its hub:
 * the relay keeps running while no daemon does, and the next one takes it over.
 */
const DockerEndpoint = z.strictObject({
  kind: z.literal('docker'),
  name: SocketName,
  /** The session's own agent on the host (a renewal takes the relay over only for the same one). */
  upstream: AbsolutePath,
  /** The VM's built-in agent socket the engine's hub serves. */
  vmSocket: AbsolutePath,
  /** Who the hub reaches it as, when not root (Colima: the socket's owner, the VM's user). */
  vmUser: z.optional(z.strictObject({ uid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)), gid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)) })),
  relay: z.string().check(z.regex(/^sandboxd-relay-[0-9a-f]{16}$/)),
  uid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)),
  gid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)),
  instance: z.string().check(z.minLength(1), z.maxLength(1024)),
  architecture: z.string().check(z.maxLength(64)),
  docker: AbsolutePath,
  env: HelperRecord.shape.env,
});

export const KeptEndpoint = z.discriminatedUnion('kind', [RelayEndpoint, TunnelEndpoint, DockerEndpoint]);
export type KeptEndpoint = z.infer<typeof KeptEndpoint>;

/** A session's sockets, and whose they are: only that client's renewal takes them over. */
export const KeptSession = z.strictObject({
  sessionId: Id,
  clientPid: z.int().check(z.minimum(1), z.maximum(2 ** 31 - 1)),
  clientStartTime: z.nullable(z.string().check(z.maxLength(200))),
  endpoints: z.array(KeptEndpoint).check(z.maxLength(16)),
});
export type KeptSession = z.infer<typeof KeptSession>;

const MAX_SESSIONS = 4096;
const FILE = 'endpoints.json';

/**
 * `endpoints.json` in the state dir: the sockets of the sessions this daemon served when it last
 * wrote it (on each change, a moment later, and as it stops gracefully), so the next daemon serves
 * the same paths running containers mount. Never trusted: what a record names is checked against
 * its schema (daemon-made names only) and the client it names must still run.
 */
export class EndpointRecords {
  private readonly file: string;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    stateDir: string,
    private readonly logger: Logger,
  ) {
    this.file = path.join(stateDir, FILE);
  }

  async load(): Promise<KeptSession[]> {
    let json: unknown;
    try {
      const text = await readStateFile(this.file, { logger: this.logger, moveAside: true });
      if (text === null) return [];
      json = JSON.parse(text);
    } catch {
      this.logger.warn({ file: this.file }, 'endpoint records unreadable; serving none of them again');
      return [];
    }
    const parsed = z.strictObject({ version: z.literal(1), sessions: z.array(z.unknown()).check(z.maxLength(MAX_SESSIONS)) }).safeParse(json);
    if (!parsed.success) {
      this.logger.warn({ file: this.file }, 'endpoint records unreadable; serving none of them again');
      return [];
    }
    const sessions: KeptSession[] = [];
    for (const candidate of parsed.data.sessions) {
      const result = KeptSession.safeParse(candidate, ENGLISH);
      if (result.success) sessions.push(result.data);
      else this.logger.warn({ file: this.file, issue: result.error.issues[0]?.message }, 'endpoint record invalid; ignoring it');
    }
    return sessions;
  }

  /** Replaces the file with these sessions; writes run one at a time, the last one wins. */
  save(sessions: readonly KeptSession[]): Promise<void> {
    const body = `${JSON.stringify({ version: 1, sessions: sessions.slice(0, MAX_SESSIONS) })}\n`;
    const next = this.writing.then(() => writeFileAtomic(this.file, body, 0o600, { durable: false }));
    this.writing = next.catch((error: unknown) => {
      this.logger.error({ err: error, file: this.file }, 'cannot record the sessions\' sockets');
    });
    return this.writing;
  }
}
