import path from 'node:path';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import type { Platform, SandboxdPaths } from '../../shared/paths.js';
import { AgentRelay } from '../bridges/agent-relay.js';
import { BridgePool } from '../bridges/bridge-pool.js';
import { Bridges } from '../bridges/bridges.js';
import { DockerBridges } from '../bridges/docker-bridges.js';
import { HelperRecords } from '../bridges/helper-records.js';
import { removeLeftoverHelpers } from '../bridges/leftover-helpers.js';
import { ownerLabel } from './containers.js';
import type { DockerEngines } from '../engines/docker-engines.js';
import { stableHash } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import { chooseBridge } from '../plan/bridge-select.js';
import { relabelFor } from '../plan/flatten.js';
import type { ServedAgent, ServeRole, Unavailable } from '../bridges/bridge.js';
import type { PodmanConnection } from '../podman/connections.js';
import { Tunnel, type TunnelRecord } from '../bridges/tunnels/tunnel.js';
import type { DaemonEdges } from './edges.js';
import { TunnelIndex } from '../podman/tunnel-index.js';
import { TunnelNames } from '../bridges/tunnels/tunnel-names.js';

export interface AgentBridgesOptions {
  platform: Platform;
  paths: SandboxdPaths;
  idleMs: number;
  logger: Logger;
  /** The daemon user's uid: with the state dir, the owner label its helper containers carry. */
  uid: number;
  /** The session's connection; `forget` drops a cached answer after a tunnel failure. */
  discover(input: AcquireInput): Promise<{ connection: PodmanConnection; forget: () => void }>;
  onTunnelChild(id: string, record: TunnelRecord | null): void;
  /** What the Docker engines behind sessions' contexts are (DESIGN §7). */
  engines: DockerEngines;
  /** Docker's relays run the docker CLI; tunnels spawn ssh and trust the daemon's known_hosts. */
  edges: Pick<DaemonEdges, 'run' | 'spawnSsh' | 'knownHostsPath'>;
}

/**
 * sshd creates the socket with its own SELinux label, which a container (container_t) may not
 * connect to; where the VM enforces SELinux, the least flag that works is `label=disable`.
 */
export function selinuxAccess(mode: string | null, connection: string): { flags: string[]; warnings: string[] } {
  if (mode?.toLowerCase() !== 'enforcing') return { flags: [], warnings: [] };
  return {
    flags: ['--security-opt', 'label=disable'],
    warnings: [`SELinux is enforcing in the VM of connection ${connection}; the plan adds --security-opt label=disable so the container can reach the agent socket`],
  };
}

/**
 * Owns the two kinds of shared bridge and picks one per session: the Linux relay for a direct
 * mount, or an `ssh -R` tunnel into the Podman machine (DESIGN §6). Both are keyed by the realpath
 * of the host socket they serve, so a session's extra sockets are further leases on the same pools.
 */
export class AgentBridges {
  readonly relays: BridgePool<AgentRelay>;
  readonly tunnels: BridgePool<Tunnel>;
  readonly docker: DockerBridges;
  readonly all: Bridges;
  /** The running tunnels by login, to ask a VM what it sees over a connection already open. */
  readonly tunnelIndex = new TunnelIndex();
  private readonly tunnelNames: TunnelNames;
  /** The relay containers this daemon's Docker bridges made and has not removed yet. */
  private readonly helperRecords: HelperRecords;

  constructor(private readonly options: AgentBridgesOptions) {
    const logger = options.logger.child({ module: 'pool' });
    this.relays = new BridgePool<AgentRelay>({ idleMs: options.idleMs, logger });
    this.tunnels = new BridgePool<Tunnel>({ idleMs: options.idleMs, logger });
    this.helperRecords = new HelperRecords(path.join(options.paths.stateDir, 'helpers.json'), options.logger.child({ module: 'helpers' }));
    this.docker = new DockerBridges({
      engines: options.engines,
      run: options.edges.run,
      stateDir: options.paths.stateDir,
      owner: ownerLabel(options.uid, options.paths.stateDir),
      records: this.helperRecords,
      workDir: path.join(options.paths.runtimeDir, 'relay-image'),
      idleMs: options.idleMs,
      logger: options.logger,
      serveLocal: (agentSocket, input) => this.serveByRelay(agentSocket, input),
      serveTunnel: (agentSocket, input, connection) =>
        connection === undefined ? this.serveByTunnel(agentSocket, input) : this.tunnelTo(agentSocket, connection, () => undefined),
    });
    this.all = new Bridges(this.relays, this.tunnels, this.docker.relays);
    this.tunnelNames = new TunnelNames(options.paths.stateDir);
  }

  /** At daemon start: removes the helper containers a killed daemon left. */
  start(): void {
    this.docker.removeLeftovers();
  }

  /** Every bridge stopped, then every helper container and volume the records still name removed (a purge). */
  async removeAll(): Promise<void> {
    await this.all.closeAll();
    await removeLeftoverHelpers({ run: this.options.edges.run, owner: ownerLabel(this.options.uid, this.options.paths.stateDir), records: this.helperRecords, logger: this.options.logger.child({ module: 'helpers' }) });
  }

  async serve(agentSocket: string, input: AcquireInput, role: ServeRole = 'agent'): Promise<ServedAgent | Unavailable> {
    const choice = chooseBridge({
      setting: input.sshBridge,
      engine: input.engine,
      platform: this.options.platform,
      env: input.client.env ?? {},
      connectionRequested: input.connection !== undefined,
    });
    if (choice.kind === 'unavailable') return { unavailable: choice.reason };
    if (choice.kind === 'engine') return this.docker.serve(agentSocket, input, role, choice.builtinOnly);
    return choice.kind === 'mount' ? this.serveByRelay(agentSocket, input) : this.serveByTunnel(agentSocket, input);
  }

  private async serveByRelay(agentSocket: string, input: AcquireInput): Promise<ServedAgent> {
    const hash = stableHash(agentSocket);
    const dir = path.join(this.options.paths.agentsDir, hash);
    const { lease } = await this.relays.acquire(`relay:${agentSocket}`, () => new AgentRelay({ id: `relay_${hash}`, agentSocket, dir, logger: this.options.logger }));
    return { lease, kind: 'mount', mountSource: dir, relabel: relabelFor(input.engine, this.options.platform), flags: [], warnings: [] };
  }

  private async serveByTunnel(agentSocket: string, input: AcquireInput): Promise<ServedAgent> {
    const { connection, forget } = await this.options.discover(input);
    const rediscover = async (): Promise<PodmanConnection> => {
      forget();
      return (await this.options.discover(input)).connection;
    };
    return this.tunnelTo(agentSocket, connection, forget, rediscover);
  }

  private async tunnelTo(agentSocket: string, connection: PodmanConnection, forget: () => void, rediscover?: () => Promise<PodmanConnection>): Promise<ServedAgent> {
    // Not the port: `podman machine start` can move it, and the tunnel follows (re-discovery).
    const { user, host } = connection.target;
    const key = ['tunnel', connection.name, user ?? '', host, connection.identity ?? '', agentSocket].join('\n');
    const hash = stableHash(key);
    const id = `tun_${hash}`;
    const dirName = await this.tunnelNames.dirName(key);
    // One root per connection and *remote* user, so a machine's `<name>` (core) and `<name>-root`
    // (root) connections never share one that only one of them can write.
    const login = [connection.name, user ?? '', host].join('\n');
    const vmRoot = await this.tunnelNames.root(login);
    const held = this.tunnels.acquire(key, () =>
      new Tunnel({
        id,
        dirName,
        connection,
        agentSocket,
        vmRoot,
        replaceRoot: (taken) => this.tunnelNames.replaceRoot(login, taken),
        index: this.tunnelIndex,
        rediscover,
        knownHostsPath: this.options.edges.knownHostsPath,
        logger: this.options.logger,
        spawnSsh: this.options.edges.spawnSsh,
        onChild: (record) => {
          this.options.onTunnelChild(id, record);
        },
      }),
    );
    held.catch(forget);
    const { lease, bridge } = await held;
    return { lease, kind: 'tunnel', mountSource: bridge.vmDir, relabel: undefined, ...selinuxAccess(bridge.selinuxMode, connection.name) };
  }
}
