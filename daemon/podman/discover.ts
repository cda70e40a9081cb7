import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { SandboxdError } from '../../shared/errors.js';
import type { ClientEnv } from '../../shared/contracts/sessions.js';
import { connectionFromHost, parseConnectionList, selectConnection, type PodmanConnection } from './connections.js';

const LIST_TIMEOUT_MS = 10_000;

/** `which`, against the session's PATH rather than the daemon's (DESIGN §4). */
export async function findExecutable(name: string, searchPath: string): Promise<string | null> {
  for (const dir of searchPath.split(path.delimiter)) {
    if (dir === '' || !path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    try {
      await fs.access(candidate, constants.X_OK);
      if ((await fs.stat(candidate)).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

export interface DiscoverInput {
  path: string;
  env: ClientEnv;
  requested?: string | undefined;
}

/** Runs the real `podman system connection list --format json` and picks the session's connection. */
export async function discoverConnection(input: DiscoverInput): Promise<PodmanConnection> {
  if (input.requested === undefined && input.env.CONTAINER_HOST?.startsWith('ssh://') === true) {
    return connectionFromHost(input.env.CONTAINER_HOST, input.env.CONTAINER_SSHKEY);
  }
  const podman = (await findExecutable('podman', input.path)) ?? (await findExecutable('podman-remote', input.path));
  if (podman === null) {
    throw new SandboxdError('PODMAN_NOT_FOUND', `podman is not on the session's PATH (searched: ${input.path || '(empty)'})`);
  }
  const env: Record<string, string> = { PATH: input.path };
  if (input.env.CONTAINERS_CONF !== undefined) env.CONTAINERS_CONF = input.env.CONTAINERS_CONF;
  if (input.env.XDG_CONFIG_HOME !== undefined) env.XDG_CONFIG_HOME = input.env.XDG_CONFIG_HOME;
  const result = await execa(podman, ['system', 'connection', 'list', '--format', 'json'], {
    env,
    reject: false,
    timeout: LIST_TIMEOUT_MS,
  });
  if (result.exitCode !== 0) {
    throw new SandboxdError('PODMAN_CONNECTIONS_UNPARSABLE', `\`${podman} system connection list\` failed: ${result.stderr.trim().split('\n').pop() ?? `exit ${result.exitCode ?? '?'}`}`);
  }
  return selectConnection({ rows: parseConnectionList(result.stdout), requested: input.requested, envConnection: input.env.CONTAINER_CONNECTION });
}
