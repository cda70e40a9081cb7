import { SandboxdError } from '../../shared/errors.js';
import type { ClientEnv } from '../../shared/contracts/sessions.js';
import { clip } from '../os/text.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { connectionFromHost, parseConnectionList, selectConnection, type PodmanConnection } from './connections.js';
import { findExecutable } from '../os/executables.js';

const LIST_TIMEOUT_MS = 10_000;


export interface DiscoverInput {
  path: string;
  env: ClientEnv;
  requested?: string | undefined;
}

/** The variables podman reads its connections from: only the session's, never the daemon's. */
const PODMAN_ENV_NAMES = ['CONTAINERS_CONF', 'PODMAN_CONNECTIONS_CONF', 'XDG_CONFIG_HOME'] as const;

export interface DiscoverDeps {
  /** The daemon user's home, where podman finds `~/.config/containers` without XDG_CONFIG_HOME. */
  home: string;
  run: RunSubprocess;
}

/** The session's podman binary and the environment it reads its connections and machines from. */
export async function podmanCommand(input: Pick<DiscoverInput, 'path' | 'env'>, home: string): Promise<{ podman: string; env: Record<string, string> }> {
  const podman = (await findExecutable('podman', input.path)) ?? (await findExecutable('podman-remote', input.path));
  if (podman === null) {
    throw new SandboxdError('PODMAN_NOT_FOUND', `podman is not on the session's PATH (searched: ${clip(input.path) || '(empty)'})`);
  }
  const env: Record<string, string> = { PATH: input.path, HOME: home };
  for (const name of PODMAN_ENV_NAMES) {
    const value = input.env[name];
    if (value !== undefined) env[name] = value;
  }
  return { podman, env };
}

/** Runs the real `podman system connection list --format json` and picks the session's connection. */
export async function discoverConnection(input: DiscoverInput, deps: DiscoverDeps): Promise<PodmanConnection> {
  if (input.requested === undefined && input.env.CONTAINER_HOST?.startsWith('ssh://') === true) {
    return connectionFromHost(input.env.CONTAINER_HOST, input.env.CONTAINER_SSHKEY);
  }
  const { podman, env } = await podmanCommand(input, deps.home);
  const result = await deps.run(podman, ['system', 'connection', 'list', '--format', 'json'], { env, timeoutMs: LIST_TIMEOUT_MS });
  if (result.exitCode !== 0) {
    const reason = result.stderr.trim().split('\n').pop() ?? '';
    throw new SandboxdError('PODMAN_CONNECTIONS_UNPARSABLE', `\`${podman} system connection list\` failed: ${clip(reason === '' ? `exit ${String(result.exitCode ?? '?')}` : reason)}`);
  }
  return selectConnection({ rows: parseConnectionList(result.stdout), requested: input.requested, envConnection: input.env.CONTAINER_CONNECTION });
}
