import type { Mount } from '../../shared/contracts/plan.js';
import type { AcquireInput, ClientEnv } from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';
import type { Logger } from '../os/logger.js';
import { sourcesToCheck, visibleMounts } from './vm-visibility.js';
import type { PodmanConnection } from './connections.js';
import type { VmSight } from './vm-view.js';

/** Where the session's containers run. */
export type SiteChoice = { kind: 'local' } | { kind: 'remote'; forcedByTunnel: boolean };

export interface SiteInput {
  engine: AcquireInput['engine'];
  platform: Platform;
  env: ClientEnv;
  connectionRequested: boolean;
  sshBridge: AcquireInput['sshBridge'];
}

/**
 * DESIGN §6 "Is Podman remote at all?": on macOS always; on Linux with an explicit connection,
 * CONTAINER_CONNECTION or an ssh CONTAINER_HOST. `--ssh-bridge tunnel` with an otherwise local
 * podman forwards the agent into the connection's VM, so the container must run there too.
 */
export function chooseSite(input: SiteInput): SiteChoice {
  if (input.engine !== 'podman') return { kind: 'local' };
  const remote =
    input.platform === 'darwin' ||
    input.connectionRequested ||
    (input.env.CONTAINER_CONNECTION ?? '') !== '' ||
    (input.env.CONTAINER_HOST ?? '').startsWith('ssh://');
  if (remote) return { kind: 'remote', forcedByTunnel: false };
  return input.sshBridge === 'tunnel' ? { kind: 'remote', forcedByTunnel: true } : { kind: 'local' };
}

/**
 * `--connection NAME` before `run` (a global flag), so `sandboxd run` and library callers start the
 * container where the tunnel's VM path exists. CONTAINER_HOST has no name to pass: podman reads
 * that variable from the caller's environment, as the daemon did.
 */
export function siteArgs(connection: PodmanConnection, forcedByTunnel: boolean): { globalArgs: string[]; warnings: string[] } {
  const globalArgs = connection.name === 'CONTAINER_HOST' ? [] : ['--connection', connection.name];
  const warnings = forcedByTunnel
    ? [`--ssh-bridge tunnel with a local podman: the container runs through connection ${connection.name} (podman --connection ${connection.name}), where the tunnel's agent socket is`]
    : [];
  return { globalArgs, warnings };
}

export interface ContainerSite {
  /** Engine arguments before `run`. */
  globalArgs: string[];
  warnings: string[];
  /** Keeps the mounts the engine's side can see; throws MOUNT_NOT_SHARED for a required one. */
  visible(mounts: Mount[]): Promise<{ mounts: Mount[]; warnings: string[] }>;
}

export interface ContainerSitesDeps {
  platform: Platform;
  /** The session's connection (the same cached answer its tunnel uses). */
  discover(input: AcquireInput): Promise<PodmanConnection>;
  sees(connection: PodmanConnection, paths: readonly string[]): Promise<VmSight>;
  logger: Logger;
}

const LOCAL: ContainerSite = { globalArgs: [], warnings: [], visible: (mounts) => Promise.resolve({ mounts, warnings: [] }) };

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Decides where a session's containers run and what of this host that side can see. */
export async function containerSite(input: AcquireInput, deps: ContainerSitesDeps): Promise<ContainerSite> {
  const choice = chooseSite({
    engine: input.engine,
    platform: deps.platform,
    env: input.client.env ?? {},
    connectionRequested: input.connection !== undefined,
    sshBridge: input.sshBridge,
  });
  if (choice.kind === 'local') return LOCAL;
  let connection: PodmanConnection;
  try {
    connection = await deps.discover(input);
  } catch (error) {
    // The agent's tunnel, if the session has one, reports this itself; without one the run may
    // still work (the engine resolves its own connection), so the plan goes on unchecked.
    const requested = input.connection === undefined ? [] : ['--connection', input.connection];
    return { ...LOCAL, globalArgs: requested, warnings: [`cannot tell which connection the container runs through, so its mounts are not checked: ${message(error)}`] };
  }
  const args = siteArgs(connection, choice.forcedByTunnel);
  return {
    ...args,
    visible: async (mounts) => {
      const paths = sourcesToCheck(mounts);
      if (paths.length === 0) return { mounts, warnings: [] };
      let sight: VmSight;
      try {
        sight = await deps.sees(connection, paths);
      } catch (error) {
        if (error instanceof SandboxdError && error.code === 'MOUNT_NOT_SHARED') throw error;
        deps.logger.warn({ err: error, connection: connection.name }, 'cannot learn what the VM sees');
        return { mounts, warnings: [`cannot ask connection ${connection.name} which paths it sees, so the mounts are not checked: ${message(error)}`] };
      }
      return visibleMounts(mounts, sight.seen, { connection: connection.name, kind: sight.kind, shares: sight.shares });
    },
  };
}
