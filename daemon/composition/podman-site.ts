import { spawn } from 'node:child_process';
import path from 'node:path';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import type { Platform } from '../../shared/paths.js';
import type { Defer } from '../cache/quiet-time.js';
import type { Logger } from '../os/logger.js';
import { runSubprocess, type RunSubprocess } from '../os/subprocess.js';
import type { TunnelIndex } from '../podman/tunnel-index.js';
import type { PodmanConnection } from '../podman/connections.js';
import type { DiscoverInput } from '../podman/discover.js';
import { podmanCommand } from '../podman/discover.js';
import { discoveryView } from '../podman/discovery-cache.js';
import { containerSite, type ContainerSite } from '../podman/engine-site.js';
import { machineVolumes } from '../podman/machine-inspect.js';
import { probeVm } from '../podman/vm-probe.js';
import { VmView } from '../podman/vm-view.js';

export interface ContainerSitesOptions {
  platform: Platform;
  hostHome: string;
  stateDir: string;
  tunnels: Pick<TunnelIndex, 'readyFor'>;
  /** The acquire's connection, the one its tunnel uses too. */
  discover(input: AcquireInput): Promise<PodmanConnection>;
  logger: Logger;
  now(): number;
  /** When a machine's volumes, past their TTL, are looked up again. */
  defer?: Defer;
  run?: RunSubprocess;
}

/** Wires `containerSite` to the real podman, ssh and file system (STYLE 4: edges in one place). */
export function createContainerSites(options: ContainerSitesOptions): (input: AcquireInput) => Promise<ContainerSite> {
  const run = options.run ?? runSubprocess;
  const knownHostsPath = path.join(options.stateDir, 'known_hosts');
  const logger = options.logger.child({ module: 'site' });
  // The machine lookup runs with the podman of the session that first asked about the connection.
  const views = new WeakMap<PodmanConnection, DiscoverInput>();
  const view = new VmView({
    machineVolumes: async (connection) => {
      const session = views.get(connection);
      if (session === undefined) return null;
      const command = await podmanCommand(session, options.hostHome);
      return machineVolumes(connection, { run, ...command });
    },
    tunnels: options.tunnels,
    probe: (connection, paths) => probeVm(connection, paths, { spawnSsh: (args) => spawn('ssh', args, { stdio: ['pipe', 'pipe', 'pipe'] }), knownHostsPath }),
    now: () => options.now(),
    ...(options.defer === undefined ? {} : { defer: options.defer }),
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
