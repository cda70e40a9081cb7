import * as z from 'zod/mini';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { SandboxdError } from '../../shared/errors.js';

/** One row of `podman system connection list --format json` (podman 4 and 5 agree on these). */
const ConnectionRow = z.looseObject({
  Name: z.string().check(z.minLength(1)),
  URI: z.string(),
  Identity: z._default(z.string(), ''),
  Default: z._default(z.boolean(), false),
  IsMachine: z.optional(z.boolean()),
});
const ConnectionList = z.nullable(z.array(ConnectionRow));

export interface SshTarget {
  user: string | null;
  host: string;
  port: number;
  /** The remote podman socket path; informative only. */
  path: string;
}

export interface PodmanConnection {
  name: string;
  uri: string;
  identity: string | null;
  isDefault: boolean;
  /** Whether podman calls this a Podman machine's connection (podman 5 omits `IsMachine` when false). */
  isMachine: boolean;
  target: SshTarget;
}

export function parseConnectionList(stdout: string): z.infer<typeof ConnectionRow>[] {
  let json: unknown;
  try {
    json = JSON.parse(stdout.trim() === '' ? 'null' : stdout);
  } catch {
    throw unparsable(`it is not JSON: ${stdout.slice(0, 120)}`);
  }
  const parsed = ConnectionList.safeParse(json, ENGLISH);
  if (!parsed.success) throw unparsable(parsed.error.issues[0]?.message ?? 'unexpected shape');
  return parsed.data ?? [];
}

function unparsable(detail: string): SandboxdError {
  return new SandboxdError('PODMAN_CONNECTIONS_UNPARSABLE', `cannot read \`podman system connection list --format json\`: ${detail}`);
}

/** `ssh://user@host:port/path`, IPv6 as `[::1]`, port 22 when absent. */
export function parseSshUri(uri: string, connection: string): SshTarget {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new SandboxdError('PODMAN_CONNECTIONS_UNPARSABLE', `connection ${connection} has an invalid URI: ${uri}`);
  }
  if (url.protocol !== 'ssh:') {
    throw new SandboxdError('PODMAN_CONNECTION_UNSUPPORTED', `connection ${connection} is ${url.protocol}// (${uri}), not ssh://; there is no VM to tunnel into`);
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (host === '') throw new SandboxdError('PODMAN_CONNECTIONS_UNPARSABLE', `connection ${connection} has no host: ${uri}`);
  return {
    user: url.username === '' ? null : decodeURIComponent(url.username),
    host,
    port: url.port === '' ? 22 : Number(url.port),
    path: decodeURIComponent(url.pathname),
  };
}

export interface SelectInput {
  rows: z.infer<typeof ConnectionRow>[];
  /** The session's explicit `connection` option. */
  requested?: string | undefined;
  /** The session's CONTAINER_CONNECTION. */
  envConnection?: string | undefined;
}

/** DESIGN §6 discovery: explicit option, then CONTAINER_CONNECTION, then Default, then the only one. */
export function selectConnection({ rows, requested, envConnection }: SelectInput): PodmanConnection {
  const wanted = requested ?? (envConnection === '' ? undefined : envConnection);
  const names = rows.map((row) => row.Name);
  let row;
  if (wanted !== undefined) {
    row = rows.find((candidate) => candidate.Name === wanted);
    if (row === undefined) {
      const source = requested === undefined ? 'CONTAINER_CONNECTION names' : 'the session asked for';
      throw new SandboxdError('PODMAN_CONNECTION_NOT_FOUND', `${source} connection "${wanted}", which podman does not list (it lists: ${names.join(', ') || 'none'})`);
    }
  } else if (rows.length === 0) {
    throw new SandboxdError('PODMAN_NO_CONNECTIONS', 'podman lists no system connections, so there is no machine to tunnel into');
  } else {
    row = rows.find((candidate) => candidate.Default) ?? (rows.length === 1 ? rows[0] : undefined);
    if (row === undefined) {
      throw new SandboxdError('PODMAN_NO_DEFAULT_CONNECTION', `podman lists ${rows.length} connections and none is the default: ${names.join(', ')}`, {
        remedy: `Run \`podman system connection default <name>\` (one of: ${names.join(', ')}), or set CONTAINER_CONNECTION.`,
      });
    }
  }
  return {
    name: row.Name,
    uri: row.URI,
    identity: row.Identity === '' ? null : row.Identity,
    isDefault: row.Default,
    isMachine: row.IsMachine === true,
    target: parseSshUri(row.URI, row.Name),
  };
}

/** CONTAINER_HOST=ssh://… makes podman remote without any listed connection. */
export function connectionFromHost(uri: string, identity: string | undefined): PodmanConnection {
  return {
    name: 'CONTAINER_HOST',
    uri,
    identity: identity === undefined || identity === '' ? null : identity,
    isDefault: false,
    isMachine: false,
    target: parseSshUri(uri, 'CONTAINER_HOST'),
  };
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
