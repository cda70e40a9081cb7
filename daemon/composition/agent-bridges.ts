import { promises as fs } from 'node:fs';
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
import { UpstreamGates } from '../bridges/bounds.js';
import { ensureSecureDir } from '../os/secure-dir.js';
import { parseSshUri } from '../podman/connections.js';
import type { DockerEngines } from '../engines/docker-engines.js';
import { stableHash } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import { chooseBridge } from '../plan/bridge-select.js';
import { relabelFor } from '../plan/flatten.js';
import { endpointLease, type ServedAgent, type ServeRole, type Unavailable } from '../bridges/bridge.js';
import type { PodmanConnection } from '../podman/connections.js';
import { Tunnel, type TunnelRecord } from '../bridges/tunnels/tunnel.js';
import type { DaemonEdges } from './edges.js';
import { TunnelIndex } from '../podman/tunnel-index.js';
import { TunnelNames } from '../bridges/tunnels/tunnel-names.js';
import { EndpointRecords, type KeptConnection, type KeptEndpoint, type KeptSession } from '../bridges/endpoint-records.js';
import { KeptEndpoints, type KeptEndpointsDeps } from '../bridges/kept-endpoints.js';
import type { ProcessProbe } from '../os/process-identity.js';

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
  edges: Pick<DaemonEdges, 'run' | 'spawnSsh' | 'knownHostsPath' | 'clock' | 'timers'>;
  /** Whether a recorded session's client still runs. */
  probe: ProcessProbe;
  /** The live sessions' sockets, as the next daemon should find them. */
  liveSessions(): KeptSession[];
  /** How long the previous daemon's sockets wait for their clients' renewals: one lease. */
  keptTtlMs: number;
  /**
   * The daemon's own git credential server: the sessions' sockets served for it name themselves
   * to it first, and only bridges with a session socket of their own on this host carry it.
   */
  credentialSocket?: string;
  /** A recorded session's credential socket, served again, answers its recorded hosts (kept-endpoints.ts). */
  answerKept?: KeptEndpointsDeps['answer'];
}

/** What a recorded tunnel socket keeps of its connection: enough to log in again. */
function keptConnection(connection: PodmanConnection): KeptConnection {
  return { name: connection.name, uri: connection.uri, identity: connection.identity, isMachine: connection.isMachine };
}

function connectionOf(kept: KeptConnection): PodmanConnection {
  return { ...kept, isDefault: false, target: parseSshUri(kept.uri, kept.name) };
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
  private readonly kept: KeptEndpoints;
  /** Sessions' sockets closed from now on keep their directories (the daemon stops gracefully). */
  private keeping = false;
  private startup: Promise<void> = Promise.resolve();
  private helpersSwept: Promise<void> = Promise.resolve();
  /** One bound toward each host socket, across every bridge that serves it. */
  private readonly gates = new UpstreamGates();
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
      keeping: () => this.keeping,
      serveLocal: (agentSocket, input, name) => this.serveByRelay(agentSocket, input.engine, name),
      serveTunnel: (agentSocket, input, name, connection) =>
        connection === undefined ? this.serveByTunnel(agentSocket, input, name) : this.tunnelTo(agentSocket, connection, name),
    });
    this.all = new Bridges(this.relays, this.tunnels, this.docker.relays);
    this.tunnelNames = new TunnelNames(options.paths.stateDir);
    this.kept = new KeptEndpoints({
      records: new EndpointRecords(options.paths.stateDir, options.logger.child({ module: 'endpoints' })),
      probe: options.probe,
      reopen: (endpoint) => this.reopen(endpoint),
      live: () => options.liveSessions(),
      ...(options.answerKept === undefined ? {} : { answer: options.answerKept }),
      ttlMs: options.keptTtlMs,
      timers: options.edges.timers,
      logger: options.logger,
    });
  }

  /**
   * At daemon start: serves again the sockets of the previous daemon's live sessions, removes the
   * session directories nothing serves any more, and the helper containers a killed daemon left.
   * Acquires wait for the removals, not for the sockets served again (a tunnel's is a login to its
   * VM; a renewal that takes one over waits for it): the directories of the live sessions' sockets
   * are known from the record first. A Docker engine's session also waits for the helpers' sweep,
   * which runs once the recorded relays, and their hubs, are up.
   */
  start(): void {
    const kept = this.clearTunnelHostDir().then(() => {
      const served = this.kept.start();
      return { served, found: this.kept.found() };
    });
    this.startup = kept.then(async ({ found }) => {
      await this.removeLeftoverDirs(await found);
    });
    this.helpersSwept = kept.then(async ({ served }) => {
      const sessions = await served;
      // A kept session's relay container, and its hub, keep running for it.
      this.docker.removeLeftovers([...sessions.flatMap((session) => session.endpoints.flatMap((endpoint) => (endpoint.kind === 'docker' ? [endpoint.relay] : []))), ...this.docker.relays.bridges().map((hub) => hub.name)]);
    });
  }

  /**
   * Stops as the daemon does gracefully: from now on a session's socket that closes keeps its
   * directory, for the next daemon to serve again (the sockets were recorded first).
   */
  async suspend(): Promise<void> {
    await this.kept.freeze();
    this.keeping = true;
    this.kept.release();
    await this.docker.removeSpares();
  }

  /** Every bridge stopped, then every helper container and volume the records still name removed (a purge): none is kept. */
  async removeAll(): Promise<void> {
    await this.all.closeAll();
    await removeLeftoverHelpers({ run: this.options.edges.run, owner: ownerLabel(this.options.uid, this.options.paths.stateDir), records: this.helperRecords, keep: [], logger: this.options.logger.child({ module: 'helpers' }) });
  }

  /** Reads what the relays in engines' VMs counted (`sessions ls`, `tunnels ls`). */
  refresh(): Promise<void> {
    return this.docker.refresh();
  }

  /** The sweep: sockets served again for a previous daemon's sessions close once their clients ended. */
  sweepKept(): Promise<void> {
    return this.kept.sweep();
  }

  /**
   * A session started or ended: the record of the sessions' sockets is written a moment later, and
   * each relay's next session socket is made now, off the path of the acquire that took the last.
   */
  changed(): void {
    this.kept.changed();
    if (this.keeping) return;
    for (const relay of this.relays.bridges()) relay.makeSpare();
  }

  /**
   * `name` is the socket's in the session (null: the agent). A renewal takes over the socket its
   * lease had, when a previous daemon recorded it (its container mounts that path).
   */
  async serve(agentSocket: string, input: AcquireInput, role: ServeRole = 'agent', name: string | null = null): Promise<ServedAgent | Unavailable> {
    await this.startup;
    if (input.renews !== undefined) {
      const kept = await this.kept.take(input.renews, input.client.pid, name, agentSocket);
      if (kept !== null) return { ...kept, relabel: kept.kind === 'mount' ? relabelFor(input.engine, this.options.platform) : kept.relabel };
    }
    const choice = chooseBridge({
      setting: input.sshBridge,
      engine: input.engine,
      platform: this.options.platform,
      env: input.client.env ?? {},
      connectionRequested: input.connection !== undefined,
    });
    if (choice.kind === 'unavailable') return { unavailable: choice.reason };
    if (choice.kind === 'engine') {
      await this.helpersSwept;
      return this.docker.serve(agentSocket, input, role, choice.builtinOnly, name);
    }
    return choice.kind === 'mount' ? this.serveByRelay(agentSocket, input.engine, name) : this.serveByTunnel(agentSocket, input, name);
  }

  private announces(upstream: string): boolean {
    return this.options.credentialSocket !== undefined && upstream === this.options.credentialSocket;
  }

  /** A recorded socket of the previous daemon, served again at its path. */
  private reopen(endpoint: KeptEndpoint): Promise<ServedAgent> {
    switch (endpoint.kind) {
      case 'relay':
        return this.serveByRelay(endpoint.upstream, 'podman', endpoint.name, endpoint.dir);
      case 'tunnel':
        return this.tunnelTo(endpoint.upstream, connectionOf(endpoint.connection), endpoint.name, { slot: endpoint.slot });
      case 'docker':
        return this.docker.reopen({ ...endpoint, upstream: endpoint.vmSocket, hostSocket: endpoint.upstream, env: Object.fromEntries(Object.entries(endpoint.env)) }, endpoint.name);
    }
  }

  /**
   * The session's own socket on the relay of its host socket (DESIGN §9); in `dirName` when a
   * recorded one is served again.
   */
  private async serveByRelay(agentSocket: string, engine: AcquireInput['engine'], name: string | null, dirName?: string): Promise<ServedAgent> {
    const hash = stableHash(agentSocket);
    const { lease, bridge } = await this.relays.acquire(`relay:${agentSocket}`, () =>
      new AgentRelay({ id: `relay_${hash}`, agentSocket, agentsDir: this.options.paths.agentsDir, gate: this.gates.for(agentSocket), announce: this.announces(agentSocket), monotonic: () => this.options.edges.clock.monotonic(), logger: this.options.logger }),
    );
    const opened = await bridge.open(dirName).catch((error: unknown) => {
      lease.release();
      throw error;
    });
    const record: KeptEndpoint = { kind: 'relay', name, upstream: agentSocket, dir: path.basename(opened.dir) };
    return {
      lease: endpointLease(lease, {
        refused: () => opened.endpoint.refused,
        kept: () => record,
        close: () => bridge.close(opened, this.keeping),
        logger: this.options.logger,
      }),
      kind: 'mount',
      mountSource: opened.dir,
      endpointPath: opened.endpoint.socketPath,
      relabel: relabelFor(engine, this.options.platform),
      flags: [],
      warnings: [],
    };
  }

  /**
   * Session directories under agents/ that no relay serves and no record of a live session names:
   * what a daemon killed before its record was written left, or an earlier release's shared
   * directories. Those of `kept` are being served again meanwhile.
   */
  private async removeLeftoverDirs(kept: readonly KeptSession[]): Promise<void> {
    const { agentsDir } = this.options.paths;
    const names = await fs.readdir(agentsDir).catch(() => []);
    const recorded = kept.flatMap((session) => session.endpoints.flatMap((endpoint) => (endpoint.kind === 'relay' ? [path.join(agentsDir, endpoint.dir)] : [])));
    const served = new Set([...this.relays.bridges().flatMap((relay) => relay.dirs()), ...recorded]);
    const left = names.filter((name) => !served.has(path.join(agentsDir, name)));
    await Promise.all(left.map((name) => fs.rm(path.join(agentsDir, name), { recursive: true, force: true })));
    if (left.length > 0) this.options.logger.info({ module: 'relay', removed: left.length }, 'removed session directories nothing serves');
  }

  private async serveByTunnel(agentSocket: string, input: AcquireInput, name: string | null): Promise<ServedAgent> {
    const { connection, forget } = await this.options.discover(input);
    const rediscover = async (): Promise<PodmanConnection> => {
      forget();
      return (await this.options.discover(input)).connection;
    };
    return this.tunnelTo(agentSocket, connection, name, { forget, rediscover });
  }

  /**
   * The session's own socket through the tunnel of its connection and host socket (DESIGN §6, §9);
   * in `slot` when a recorded one is served again.
   */
  private async tunnelTo(agentSocket: string, connection: PodmanConnection, name: string | null, how: { forget?: () => void; rediscover?: () => Promise<PodmanConnection>; slot?: string } = {}): Promise<ServedAgent> {
    const forget = how.forget ?? (() => undefined);
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
    const hostDir = this.tunnelHostDir();
    await ensureSecureDir(hostDir);
    const held = this.tunnels.acquire(key, () =>
      new Tunnel({
        id,
        dirName,
        connection,
        agentSocket,
        announce: this.announces(agentSocket),
        vmRoot,
        hostDir,
        gate: this.gates.for(agentSocket),
        monotonic: () => this.options.edges.clock.monotonic(),
        keeping: () => this.keeping,
        replaceRoot: (taken) => this.tunnelNames.replaceRoot(login, taken),
        index: this.tunnelIndex,
        rediscover: how.rediscover,
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
    const opened = await bridge.open(how.slot).catch((error: unknown) => {
      lease.release();
      throw error;
    });
    const record: KeptEndpoint = { kind: 'tunnel', name, upstream: agentSocket, slot: opened.slot.name, connection: keptConnection(connection) };
    return {
      lease: endpointLease(lease, {
        refused: () => opened.slot.endpoint.refused,
        kept: () => record,
        close: () => bridge.close(opened.slot, this.keeping),
        logger: this.options.logger,
      }),
      kind: 'tunnel',
      mountSource: opened.vmDir,
      endpointPath: opened.slot.endpoint.socketPath,
      relabel: undefined,
      ...selinuxAccess(bridge.selinuxMode, connection.name),
    };
  }

  /** Daemon-private: the tunnels' control sockets and the host ends of the sessions' forwards. */
  private tunnelHostDir(): string {
    return path.join(this.options.paths.runtimeDir, 't');
  }

  /**
   * What a previous daemon left there: a control socket of its ssh would stop a new master of the
   * same name from listening; the host ends are bound again by whoever serves them.
   */
  private async clearTunnelHostDir(): Promise<void> {
    const dir = this.tunnelHostDir();
    const names = await fs.readdir(dir).catch(() => []);
    await Promise.all(names.map((entry) => fs.rm(path.join(dir, entry), { force: true })));
  }
}
