import path from 'node:path';
import { ERROR_SPECS, isSandboxdError } from '../../shared/errors.js';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import { listAgentKeys } from '../engines/agent-keys.js';
import type { VmUser } from '../engines/builtin-probe.js';
import type { DockerEngines } from '../engines/docker-engines.js';
import type { IdentifiedEngine } from '../engines/engine-identifier.js';
import type { EngineBridge } from '../engines/profile.js';
import { stableHash } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import { connectionFromHost, type PodmanConnection } from '../podman/connections.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { CONTAINER_AGENT_DIR, type Lease, type ServedAgent, type ServeRole, type Unavailable } from './bridge.js';
import { BridgePool } from './bridge-pool.js';
import { DesktopRelay, sessionMountFlags } from './desktop-relay.js';
import { helperLabels, type HelperRecords } from './helper-records.js';
import { removeLeftoverHelpers } from './leftover-helpers.js';
import { ensureRelayImage, RELAY_BINARY_IN_IMAGE } from './relay-image.js';

export interface DockerBridgesDeps {
  engines: DockerEngines;
  run: RunSubprocess;
  /** sandboxd's state dir: relay container names carry it, so two daemons never share one. */
  stateDir: string;
  /** This daemon's owner label, on every helper container and volume. */
  owner: string;
  /** The relay containers made and not removed yet, for the start-up sweep of the next daemon. */
  records: HelperRecords;
  /** Daemon-owned scratch directory for the relay image archive. */
  workDir: string;
  idleMs: number;
  logger: Logger;
  /** The local relay (an engine on this host). */
  serveLocal(agentSocket: string, input: AcquireInput): Promise<ServedAgent>;
  /** An `ssh -R` tunnel: into the session's Podman machine, or into the given host. */
  serveTunnel(agentSocket: string, input: AcquireInput, connection?: PodmanConnection): Promise<ServedAgent>;
}

/** The built-in socket needs no process for root: the lease only marks the session's use of it. */
function markerLease(bridgeId: string): Lease {
  return { bridgeId, release: () => undefined };
}

/** Keys the session's agent holds that the VM's agent lacks, as a warning with the remedy. */
export function agentMismatchWarning(label: string, vmKeys: readonly string[], sessionKeys: readonly string[] | null): string | null {
  if (sessionKeys === null || sessionKeys.length === 0) return null;
  const missing = sessionKeys.filter((key) => !vmKeys.includes(key));
  if (missing.length === 0) return null;
  return (
    `${label} serves the agent it saw when it started, not this shell's SSH_AUTH_SOCK: ${missing.length} of your ${sessionKeys.length} key(s) ` +
    `are missing in it (it holds ${vmKeys.length}). Restart ${label} from a session whose SSH_AUTH_SOCK is your agent ` +
    '(macOS: `launchctl setenv SSH_AUTH_SOCK "$SSH_AUTH_SOCK"`, then quit and reopen it), or pass --ssh-agent off.'
  );
}

/**
 * The agent bridge for `--engine docker` (DESIGN §7): identify the engine behind the session's
 * docker context, then use its built-in socket (verified by a probe; through a shared relay
 * container for non-root users), the Podman tunnel, an ssh tunnel, the local relay, or nothing.
 */
export class DockerBridges {
  readonly relays: BridgePool<DesktopRelay>;
  /**
   * The start-up sweep of helpers a killed daemon left: probes and relays wait for it, since it
   * removes every helper with this daemon's owner label.
   */
  private swept: Promise<void> = Promise.resolve();
  /** Imports of the relay image under way, by engine instance. */
  private readonly imports = new Map<string, Promise<string>>();

  constructor(private readonly deps: DockerBridgesDeps) {
    this.relays = new BridgePool<DesktopRelay>({ idleMs: deps.idleMs, logger: deps.logger.child({ module: 'pool' }) });
  }

  /** Called once at start-up. */
  removeLeftovers(): void {
    this.swept = removeLeftoverHelpers({ run: this.deps.run, owner: this.deps.owner, records: this.deps.records, logger: this.deps.logger.child({ module: 'helpers' }) }).catch((error: unknown) => {
      this.deps.logger.error({ err: error }, 'cannot remove helpers a previous daemon left');
    });
  }

  async serve(agentSocket: string, input: AcquireInput, role: ServeRole, builtinOnly: boolean): Promise<ServedAgent | Unavailable> {
    let engine: IdentifiedEngine;
    try {
      engine = await this.deps.engines.identify(input);
    } catch (error) {
      // Under `auto` an engine that cannot be identified costs the agent, never the session.
      if (!isSandboxdError(error) || (role === 'agent' && input.sshAgent === 'on')) throw error;
      return { unavailable: error.message, remedy: error.remedy };
    }
    const { bridge, label } = engine.identity;
    if (builtinOnly && bridge.kind !== 'builtin') {
      return { unavailable: `the desktop bridge needs an engine with a built-in agent socket; the session's engine is ${label}`, remedy: 'Pass --ssh-bridge auto.' };
    }
    return this.serveBy(bridge, engine, agentSocket, input, role);
  }

  private serveBy(bridge: EngineBridge, engine: IdentifiedEngine, agentSocket: string, input: AcquireInput, role: ServeRole): Promise<ServedAgent | Unavailable> | Unavailable {
    switch (bridge.kind) {
      case 'relay':
        return this.deps.serveLocal(agentSocket, input);
      case 'podman-tunnel':
        return this.deps.serveTunnel(agentSocket, input);
      case 'ssh-tunnel':
        return this.deps.serveTunnel(agentSocket, input, { ...connectionFromHost(bridge.uri, undefined), name: 'DOCKER_HOST' });
      case 'skip':
        return { unavailable: bridge.reason, remedy: bridge.remedy };
      case 'builtin':
        if (role === 'socket') {
          return { unavailable: `${engine.identity.label} carries only its own agent into its VM, not other host sockets`, remedy: 'Use a Podman machine or Docker Engine on Linux for extra sockets.' };
        }
        return this.serveBuiltin(bridge, engine, agentSocket, input);
    }
  }

  private async serveBuiltin(bridge: Extract<EngineBridge, { kind: 'builtin' }>, engine: IdentifiedEngine, agentSocket: string, input: AcquireInput): Promise<ServedAgent | Unavailable> {
    const { label, instance } = engine.identity;
    await this.swept;
    const probe = await this.deps.engines.probe(engine, bridge.socket, {
      tag: () => this.relayImage(engine),
      entrypoint: RELAY_BINARY_IN_IMAGE,
      labels: helperLabels(this.deps.owner, 'probe'),
    });
    const warnings: string[] = [];
    if (probe.state === 'denied') {
      // The agent is forwarded, only not to sandboxd's user: "start it with the agent" would mislead.
      return { unavailable: `${label}: ${probe.detail}`, remedy: ERROR_SPECS.AGENT_SOCKET_DENIED.remedy, code: 'AGENT_SOCKET_DENIED' };
    } else if (probe.state === 'missing' || probe.state === 'unusable') {
      return { unavailable: `${label}: ${probe.detail}`, remedy: bridge.missingRemedy };
    } else if (probe.state === 'unverified') {
      warnings.push(`the agent socket of ${label} is used unverified: ${probe.detail}`);
    } else {
      const mismatch = agentMismatchWarning(label, probe.keys, await listAgentKeys(agentSocket));
      if (mismatch !== null) warnings.push(mismatch);
    }
    const user = input.containerUser ?? { uid: 0, gid: 0 };
    // The user who may connect mounts the socket itself: root on Docker Desktop, the VM's user on Colima.
    if (user.uid === probe.user.uid) {
      return { kind: 'desktop', lease: markerLease(`desk_${instance.slice(4)}`), mountSource: bridge.socket, socketFile: true, relabel: undefined, flags: [], warnings };
    }
    try {
      return await this.serveByRelayContainer(bridge.socket, probe.user, engine, user.uid, user.gid, warnings);
    } catch (error) {
      if (!isSandboxdError(error) || input.sshAgent === 'on') throw error;
      return { unavailable: error.message, remedy: error.remedy };
    }
  }

  /**
   * sandboxd's own image in the engine, for the probe and the relay containers alike; callers at
   * the same time share one import (they would write the same archive).
   */
  private relayImage(engine: IdentifiedEngine): Promise<string> {
    const { instance, architecture } = engine.identity;
    const pending = this.imports.get(instance);
    if (pending !== undefined) return pending;
    const dir = stableHash([this.deps.stateDir, instance].join('\n'), 16);
    const started = ensureRelayImage(architecture, { run: this.deps.run, docker: engine.docker, env: engine.env, workDir: path.join(this.deps.workDir, dir) }).finally(() => {
      this.imports.delete(instance);
    });
    this.imports.set(instance, started);
    return started;
  }

  private async serveByRelayContainer(socket: string, upstreamUser: VmUser, engine: IdentifiedEngine, uid: number, gid: number, warnings: string[]): Promise<ServedAgent> {
    const { instance } = engine.identity;
    const hash = stableHash([this.deps.stateDir, instance, uid, gid].join('\n'), 16);
    const name = `sandboxd-relay-${hash}`;
    const { lease } = await this.relays.acquire(`${instance}\n${uid}:${gid}`, () =>
      new DesktopRelay({
        id: `crelay_${hash}`,
        name,
        upstream: socket,
        upstreamUser,
        uid,
        gid,
        owner: this.deps.owner,
        records: this.deps.records,
        image: () => this.relayImage(engine),
        run: this.deps.run,
        docker: engine.docker,
        env: engine.env,
        logger: this.deps.logger,
      }),
    );
    return { kind: 'desktop', lease, mountSource: null, relabel: undefined, flags: sessionMountFlags(name, CONTAINER_AGENT_DIR), warnings };
  }
}
