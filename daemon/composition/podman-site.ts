import type { AcquireInput } from '../../shared/contracts/sessions.js';
import type { Platform } from '../../shared/paths.js';
import type { Defer } from '../cache/quiet-time.js';
import type { Logger } from '../os/logger.js';
import type { TunnelIndex } from '../podman/tunnel-index.js';
import type { PodmanConnection } from '../podman/connections.js';
import type { DiscoverInput } from '../podman/discover.js';
import { discoveryView } from '../podman/discovery-cache.js';
import { containerSite, type ContainerSite } from '../podman/engine-site.js';
import { createMachineVolumes, machineConfigDirs } from '../podman/machine-config.js';
import { probeVm } from '../podman/vm-probe.js';
import { VmView, VIEW_TTL_MS } from '../podman/vm-view.js';
import type { DaemonEdges } from './edges.js';

export interface ContainerSitesOptions {
  platform: Platform;
  hostHome: string;
  /** VM probes spawn ssh, trusting the daemon's known_hosts; every age is on the monotonic clock. */
  edges: Pick<DaemonEdges, 'spawnSsh' | 'knownHostsPath' | 'clock'>;
  tunnels: Pick<TunnelIndex, 'readyFor'>;
  /** The acquire's connection, the one its tunnel uses too. */
  discover(input: AcquireInput): Promise<PodmanConnection>;
  logger: Logger;
  /** When a machine's volumes, past their TTL, are read again. */
  defer?: Defer;
}

/** Wires `containerSite` to the real podman, ssh and file system (STYLE 4: edges in one place). */
export function createContainerSites(options: ContainerSitesOptions): (input: AcquireInput) => Promise<ContainerSite> {
  const { spawnSsh, knownHostsPath, clock } = options.edges;
  const now = (): number => clock.monotonic();
  const logger = options.logger.child({ module: 'site' });
  // A machine's configs are where the session's podman keeps them (its XDG_CONFIG_HOME).
  const views = new WeakMap<PodmanConnection, DiscoverInput>();
  const volumesOf = createMachineVolumes({ now, ttlMs: VIEW_TTL_MS, defer: options.defer });
  const view = new VmView({
    machineVolumes: async (connection) => {
      const session = views.get(connection);
      if (session === undefined) return null;
      const volumes = await volumesOf({ connection, dirs: machineConfigDirs(session.env, options.hostHome) });
      if (volumes === null) logger.debug({ connection: connection.name }, 'no config of this machine found; asking the VM what it sees');
      return volumes;
    },
    tunnels: options.tunnels,
    probe: (connection, paths) => probeVm(connection, paths, { spawnSsh, knownHostsPath }),
    now,
  });
  return (input) =>
    containerSite(input, {
      platform: options.platform,
      discover: async (session) => {
        const connection = await options.discover(session);
        views.set(connection, discoveryView(session));
        return connection;
      },
      sees: (connection, paths) => view.sees(connection, paths),
      logger,
    });
}
