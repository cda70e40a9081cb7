import path from 'node:path';
import { spawn } from 'node:child_process';
import type { AcquireInput } from '../shared/contracts/sessions.js';
import type { Platform, SandboxdPaths } from '../shared/paths.js';
import { AgentRelay } from './bridges/agent-relay.js';
import { BridgePool } from './bridges/bridge-pool.js';
import { Bridges } from './bridges/bridges.js';
import { stableHash } from './ids.js';
import type { Logger } from './logger.js';
import { chooseBridge } from './plan/bridge-select.js';
import { relabelFor } from './plan/flatten.js';
import type { ServedAgent } from './plan/ssh.js';
import type { PodmanConnection } from './podman/connections.js';
import { Tunnel, type SpawnSsh, type TunnelRecord } from './tunnels/tunnel.js';

export interface AgentBridgesOptions {
  platform: Platform;
  paths: SandboxdPaths;
  uid: number;
  idleMs: number;
  logger: Logger;
  /** The session's connection; `forget` drops a cached answer after a tunnel failure. */
  discover(input: AcquireInput): Promise<{ connection: PodmanConnection; forget: () => void }>;
  onTunnelChild(id: string, record: TunnelRecord | null): void;
}

const spawnSsh: SpawnSsh = (args) => spawn('ssh', args, { stdio: ['pipe', 'pipe', 'pipe'] });

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

/** Where tunnels live in the VM: one directory per host user (and per sandboxd state dir). */
export function vmRootFor(uid: number, stateDir: string): string {
  return `/tmp/sandboxd-${stableHash(`${uid}:${stateDir}`, 10)}`;
}

/**
 * Owns the two kinds of shared bridge and picks one per session: the Linux relay for a direct
 * mount, or an `ssh -R` tunnel into the Podman machine (DESIGN §6). Both are keyed by the realpath
 * of the host socket they serve, so a session's extra sockets are further leases on the same pools.
 */
export class AgentBridges {
  readonly relays: BridgePool<AgentRelay>;
  readonly tunnels: BridgePool<Tunnel>;
  readonly all: Bridges;
  readonly vmRoot: string;

  constructor(private readonly options: AgentBridgesOptions) {
    const logger = options.logger.child({ module: 'pool' });
    this.relays = new BridgePool<AgentRelay>({ idleMs: options.idleMs, logger });
    this.tunnels = new BridgePool<Tunnel>({ idleMs: options.idleMs, logger });
    this.all = new Bridges(this.relays, this.tunnels);
    this.vmRoot = vmRootFor(options.uid, options.paths.stateDir);
  }

  async serve(agentSocket: string, input: AcquireInput): Promise<ServedAgent | { unavailable: string }> {
    const choice = chooseBridge({
      setting: input.sshBridge,
      engine: input.engine,
      platform: this.options.platform,
      env: input.client.env ?? {},
      connectionRequested: input.connection !== undefined,
    });
    if (choice.kind === 'unavailable') return { unavailable: choice.reason };
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
    const key = ['tunnel', connection.name, connection.uri, connection.identity ?? '', agentSocket].join('\n');
    const hash = stableHash(key);
    const id = `tun_${hash}`;
    const held = this.tunnels.acquire(key, () =>
      new Tunnel({
        id,
        hash,
        connection,
        agentSocket,
        vmRoot: this.vmRoot,
        knownHostsPath: path.join(this.options.paths.stateDir, 'known_hosts'),
        logger: this.options.logger,
        spawnSsh,
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
