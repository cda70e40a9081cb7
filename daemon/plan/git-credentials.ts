/*
 * HTTPS credentials for the hosts a session named (`--git-credentials`): git in the container asks
 * the session's own socket through git's own `credential-cache` helper, which every git with Unix
 * sockets has (no program of sandboxd's in the image, any architecture), and the daemon answers
 * `get` from the user's host git (daemon/credentials/).
 */
import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';
import type { AcquireInput, GitCredentialsStatus } from '../../shared/contracts/sessions.js';
import { RELAY_SOCKET_NAME } from '../bridges/agent-relay.js';
import type { Lease } from '../bridges/bridge.js';
import type { KeptCredentials, KeptEndpoint } from '../bridges/endpoint-records.js';
import { fillContext, type CredentialSession } from '../credentials/credential-server.js';
import { socketBridge, type SshDeps } from './host-sockets.js';

/** The session's credential socket's directory in every container; the socket is `agent.sock` in it. */
export const CONTAINER_CREDENTIAL_DIR = '/run/sandboxd/git-credential';
export const CONTAINER_CREDENTIAL_SOCKET = path.posix.join(CONTAINER_CREDENTIAL_DIR, RELAY_SOCKET_NAME);
/** The name its socket has among the session's sockets (records, kept endpoints). */
export const CREDENTIAL_SOCKET_NAME = 'git-credential';

/** How the plan reaches the daemon's credential server. */
export interface CredentialDeps {
  /** The server's socket, which each session's own socket pipes to. */
  socket: string;
  hostHome: string;
  /** The session whose own socket is `endpoint` may ask from now on; the answer ends that. */
  register(endpoint: string, session: CredentialSession): () => void;
}

export interface CredentialsSection {
  status: GitCredentialsStatus;
  mounts: Mount[];
  env: Record<string, string>;
  flags: string[];
  warnings: string[];
  /** What was set that needs no action: which hosts are served. */
  notices: string[];
  leases: Lease[];
}

const NONE: CredentialsSection = { status: null, mounts: [], env: {}, flags: [], warnings: [], notices: [], leases: [] };

/**
 * Command-scope config (GIT_CONFIG_COUNT, git ≥ 2.31), which git reads after every file, the
 * repository's included: for each host the helper list is emptied, then the session's helper is
 * the only one. Scoped to `https://HOST[:PORT]`, so git asks it for nothing else.
 */
export function credentialHelperEnv(hosts: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  const helper = `cache --socket ${CONTAINER_CREDENTIAL_SOCKET}`;
  hosts.forEach((host, index) => {
    const key = `credential.https://${host}.helper`;
    env[`GIT_CONFIG_KEY_${String(2 * index)}`] = key;
    env[`GIT_CONFIG_VALUE_${String(2 * index)}`] = '';
    env[`GIT_CONFIG_KEY_${String(2 * index + 1)}`] = key;
    env[`GIT_CONFIG_VALUE_${String(2 * index + 1)}`] = helper;
  });
  env.GIT_CONFIG_COUNT = String(2 * hosts.length);
  return env;
}

function skipped(hosts: string[], reason: string, remedy?: string): CredentialsSection {
  const list = hosts.join(', ');
  return {
    ...NONE,
    status: { status: 'skipped', hosts, reason },
    warnings: [`git: HTTPS credentials for ${list} are not served: ${reason}${remedy === undefined ? '' : ` (remedy: ${remedy})`}`],
  };
}

/** A record of the session's credential socket, with what it answers; a Docker relay's carries none. */
function withCredentials(endpoint: KeptEndpoint, credentials: KeptCredentials): KeptEndpoint {
  return endpoint.kind === 'docker' ? endpoint : { ...endpoint, credentials };
}

/**
 * The session's credential socket through the bridge its extra sockets take (the local relay for
 * Podman or a Docker Engine on this host, or an ssh tunnel into a Podman machine or a remote
 * engine), registered with the daemon's server under that socket's own path.
 * Never fatal: a bridge that cannot carry it is a warning naming why.
 */
export async function planGitCredentials(input: AcquireInput, sessionId: string, deps: SshDeps, credentials: CredentialDeps | undefined): Promise<CredentialsSection> {
  const hosts = input.gitCredentials;
  if (hosts.length === 0) return NONE;
  if (credentials === undefined) return skipped(hosts, 'this daemon serves no credentials');
  let served;
  try {
    served = await deps.serve(credentials.socket, { ...input, sshBridge: socketBridge(input.sshBridge) }, 'credentials', CREDENTIAL_SOCKET_NAME);
  } catch (error) {
    return skipped(hosts, error instanceof Error ? error.message : String(error));
  }
  if ('unavailable' in served) return skipped(hosts, served.unavailable, served.remedy);
  if (served.kind === 'desktop' || served.mountSource === null || served.endpointPath === undefined) {
    served.lease.release();
    return skipped(hosts, 'its bridge has no socket of the session\'s own on this host', 'use an ssh remote, a Podman machine (`--engine podman`), or Docker Engine on Linux');
  }
  const answers: KeptCredentials = { hosts, path: input.client.path ?? '', ...(input.client.env?.XDG_CONFIG_HOME === undefined ? {} : { xdgConfigHome: input.client.env.XDG_CONFIG_HOME }) };
  const unregister = credentials.register(served.endpointPath, { sessionId, hosts, fill: fillContext(credentials.hostHome, answers) });
  const bridgeLease = served.lease;
  const lease: Lease = {
    ...bridgeLease,
    release: () => {
      unregister();
      bridgeLease.release();
    },
    // The next daemon answers the same hosts on this socket until the client renews (kept-endpoints.ts).
    ...(bridgeLease.kept === undefined ? {} : { kept: () => withCredentials(bridgeLease.kept?.() as KeptEndpoint, answers) }),
  };
  return {
    status: { status: 'served', hosts, bridge: served.kind, socket: CONTAINER_CREDENTIAL_SOCKET },
    // Read-only, as every session socket's directory: the container cannot put a listener of its own there.
    mounts: [{ source: served.mountSource, target: CONTAINER_CREDENTIAL_DIR, readOnly: true, purpose: 'git credentials', relabel: served.relabel }],
    env: credentialHelperEnv(hosts),
    flags: served.flags,
    warnings: served.warnings,
    notices: [
      `git: HTTPS credentials for ${hosts.join(', ')} come from your host's git credential helpers (get only; store and erase are dropped); code in the sandbox can read those tokens and use them for whatever they allow`,
    ],
    leases: [lease],
  };
}
