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
import { CONTAINER_AGENT_DIR, endpointLease, type ServedAgent, type ServeRole, type Unavailable } from './bridge.js';
import { BridgePool } from './bridge-pool.js';
import { DesktopRelay } from './desktop-relay.js';
import type { KeptEndpoint } from './endpoint-records.js';
import { helperLabels, helperRecord, type HelperRecords } from './helper-records.js';
import { SessionRelays, sessionMountFlags } from './session-relays.js';
import { removeLeftoverHelpers } from './leftover-helpers.js';
import { ensureRelayImage, RELAY_BINARY_IN_IMAGE } from './relay-image.js';

/** An engine instance as the relays need it: how to reach it and which hub is its. */
export interface HubEngine {
  instance: string;
  architecture: string;
  docker: string;
  env: Record<string, string>;
  /** The VM's built-in agent socket the hub serves. */
  upstream: string;
  /** Who may connect to it, as the probe found (root when absent): the hub runs as this user. */
  vmUser?: VmUser;
}

/** A session's relay container, as its record names it (kept across a graceful stop). */
export interface SessionRelayRecord extends HubEngine {
  relay: string;
  uid: number;
  gid: number;
  /** The session's own agent on the host. */
  hostSocket: string;
}

export interface DockerBridgesDeps {
  engines: DockerEngines;
  run: RunSubprocess;
  /** sandboxd's state dir: hub names carry it, so two daemons never share one. */
  stateDir: string;
  /** This daemon's owner label, on every helper container and volume. */
  owner: string;
  /** The relay containers made and not removed yet, for the start-up sweep of the next daemon. */
  records: HelperRecords;
  /** Daemon-owned scratch directory for the relay image archive. */
  workDir: string;
  idleMs: number;
  logger: Logger;
  /** Whether the daemon stops gracefully: the sessions' relays and their hubs then keep running. */
  keeping(): boolean;
  /** The local relay (an engine on this host). */
  serveLocal(agentSocket: string, input: AcquireInput, name: string | null): Promise<ServedAgent>;
  /** An ssh tunnel: into the session's Podman machine, or into the given host. */
  serveTunnel(agentSocket: string, input: AcquireInput, name: string | null, connection?: PodmanConnection): Promise<ServedAgent>;
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
 * An engine whose VM reaches the host only through its own forwarder of the agent cannot carry a
 * session's credential socket: no host socket can be bind-mounted into its VM, and a listener its
 * containers reach over the network would be every container's, the session's identity then
 * resting on what the container says.
 */
export function builtinCredentialsUnavailable(label: string): Unavailable {
  return {
    unavailable: `${label} carries only its own agent into its VM: no socket of the session's own reaches its containers, so no request could be told from another container's`,
    remedy: 'use an ssh remote (the agent is forwarded), a Podman machine (`--engine podman`), or Docker Engine on Linux',
  };
}

/**
 * The agent bridge for `--engine docker` (DESIGN §7): identify the engine behind the session's
 * docker context, then use its built-in socket (verified by a probe; through the engine's hub and
 * a relay container of the session's own), the Podman tunnel, an ssh tunnel, the local relay, or
 * nothing.
 */
export class DockerBridges {
  /** One hub per engine instance, shared by its sessions by reference count. */
  readonly relays: BridgePool<DesktopRelay>;
  /** The sessions' relays, by engine instance. */
  private readonly sessionRelays = new Map<string, SessionRelays>();
  /**
   * The start-up sweep of helpers a killed daemon left: probes and relays wait for it, since it
   * removes every helper with this daemon's owner label but those kept for live sessions.
   */
  private swept: Promise<void> = Promise.resolve();
  /** Imports of the relay image under way, by engine instance. */
  private readonly imports = new Map<string, Promise<string>>();

  constructor(private readonly deps: DockerBridgesDeps) {
    this.relays = new BridgePool<DesktopRelay>({ idleMs: deps.idleMs, logger: deps.logger.child({ module: 'pool' }) });
  }

  /** Called once at start-up, once the sockets the previous daemon kept (`keep`: their containers) are known. */
  removeLeftovers(keep: readonly string[]): void {
    this.swept = removeLeftoverHelpers({ run: this.deps.run, owner: this.deps.owner, records: this.deps.records, keep, logger: this.deps.logger.child({ module: 'helpers' }) }).catch((error: unknown) => {
      this.deps.logger.error({ err: error }, 'cannot remove helpers a previous daemon left');
    });
  }

  async serve(agentSocket: string, input: AcquireInput, role: ServeRole, builtinOnly: boolean, name: string | null): Promise<ServedAgent | Unavailable> {
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
    return this.serveBy(bridge, engine, agentSocket, input, role, name);
  }

  /** Reads the relays' status lines, for `sessions ls` and `tunnels ls`. */
  async refresh(): Promise<void> {
    await Promise.all([...this.relays.bridges().map((hub) => hub.refresh()), ...[...this.sessionRelays.values()].map((relays) => relays.refresh())]);
  }

  /** A recorded session's relay, kept running across the daemon's stop, served again for its renewal. */
  async reopen(record: SessionRelayRecord, name: string | null): Promise<ServedAgent> {
    return this.serveByRelayContainer(record, record.hostSocket, { uid: record.uid, gid: record.gid }, [], name, record.relay);
  }

  private serveBy(bridge: EngineBridge, engine: IdentifiedEngine, agentSocket: string, input: AcquireInput, role: ServeRole, name: string | null): Promise<ServedAgent | Unavailable> | Unavailable {
    switch (bridge.kind) {
      case 'relay':
        return this.deps.serveLocal(agentSocket, input, name);
      case 'podman-tunnel':
        return this.deps.serveTunnel(agentSocket, input, name);
      case 'ssh-tunnel':
        return this.deps.serveTunnel(agentSocket, input, name, { ...connectionFromHost(bridge.uri, undefined), name: 'DOCKER_HOST' });
      case 'skip':
        return { unavailable: bridge.reason, remedy: bridge.remedy };
      case 'builtin':
        if (role === 'credentials') return builtinCredentialsUnavailable(engine.identity.label);
        if (role === 'socket') {
          return { unavailable: `${engine.identity.label} carries only its own agent into its VM, not other host sockets`, remedy: 'Use a Podman machine or Docker Engine on Linux for extra sockets.' };
        }
        return this.serveBuiltin(bridge, engine, agentSocket, input, name);
    }
  }

  private async serveBuiltin(bridge: Extract<EngineBridge, { kind: 'builtin' }>, engine: IdentifiedEngine, agentSocket: string, input: AcquireInput, name: string | null): Promise<ServedAgent | Unavailable> {
    const { label, instance, architecture } = engine.identity;
    await this.swept;
    const reach: HubEngine = { instance, architecture, docker: engine.docker, env: engine.env, upstream: bridge.socket };
    const probe = await this.deps.engines.probe(engine, bridge.socket, {
      tag: () => this.relayImage(reach),
      entrypoint: RELAY_BINARY_IN_IMAGE,
      labels: helperLabels(this.deps.owner, 'probe'),
    });
    // The hub reaches the socket as the user the probe found may: root, or its owner (Colima).
    const hubEngine: HubEngine = { ...reach, vmUser: probe.user };
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
    try {
      return await this.serveByRelayContainer(hubEngine, agentSocket, user, warnings, name);
    } catch (error) {
      if (!isSandboxdError(error) || input.sshAgent === 'on') throw error;
      return { unavailable: error.message, remedy: error.remedy };
    }
  }

  /**
   * sandboxd's own image in the engine, for the probe and the relay containers alike; callers at
   * the same time share one import (they would write the same archive).
   */
  private relayImage(engine: Pick<HubEngine, 'instance' | 'architecture' | 'docker' | 'env'>): Promise<string> {
    const { instance, architecture } = engine;
    const pending = this.imports.get(instance);
    if (pending !== undefined) return pending;
    const dir = stableHash([this.deps.stateDir, instance].join('\n'), 16);
    const started = ensureRelayImage(architecture, { run: this.deps.run, docker: engine.docker, env: engine.env, workDir: path.join(this.deps.workDir, dir) }).finally(() => {
      this.imports.delete(instance);
    });
    this.imports.set(instance, started);
    return started;
  }

  /**
   * The session's own relay container behind the engine's hub (DESIGN §7, §9); `relay` when a
   * recorded one is served again.
   */
  private async serveByRelayContainer(engine: HubEngine, hostSocket: string, user: { uid: number; gid: number }, warnings: string[], name: string | null, relay?: string): Promise<ServedAgent> {
    const { instance } = engine;
    const { uid, gid } = user;
    const hash = stableHash([this.deps.stateDir, instance].join('\n'), 16);
    const hub = `sandboxd-hub-${hash}`;
    const sessions = this.relaysOf(engine, hub);
    // The hub is the bridge the sessions of an engine share (`tunnels ls`); each has a relay of its own.
    const { lease } = await this.relays.acquire(instance, () =>
      new DesktopRelay({
        id: `crelay_${hash}`,
        name: hub,
        upstream: engine.upstream,
        upstreamUser: engine.vmUser,
        owner: this.deps.owner,
        records: this.deps.records,
        image: () => this.relayImage(engine),
        sessions: () => ({ endpoints: sessions.inUse, refused: sessions.refused, rebound: sessions.rebound.count, said: sessions.rebound.said, kept: sessions.kept }),
        keeping: () => this.deps.keeping(),
        beforeRemoval: () => sessions.removeSpares(),
        run: this.deps.run,
        docker: engine.docker,
        env: engine.env,
        logger: this.deps.logger,
      }),
    );
    const opened = await sessions.open(uid, gid, relay).catch((error: unknown) => {
      lease.release();
      throw error;
    });
    const record: KeptEndpoint = {
      kind: 'docker',
      name,
      upstream: hostSocket,
      vmSocket: engine.upstream,
      ...(engine.vmUser === undefined || engine.vmUser.uid === 0 ? {} : { vmUser: engine.vmUser }),
      relay: opened.name,
      uid,
      gid,
      instance,
      architecture: engine.architecture,
      docker: engine.docker,
      env: helperRecord(opened.name, engine.docker, engine.env).env,
    };
    return {
      kind: 'desktop',
      lease: endpointLease(lease, {
        refused: () => opened.refused,
        kept: () => record,
        close: () => sessions.close(opened, this.deps.keeping()),
        logger: this.deps.logger,
      }),
      mountSource: null,
      relabel: undefined,
      flags: sessionMountFlags(opened.name, CONTAINER_AGENT_DIR),
      warnings,
    };
  }

  private relaysOf(engine: HubEngine, hub: string): SessionRelays {
    let relays = this.sessionRelays.get(engine.instance);
    if (relays === undefined) {
      relays = new SessionRelays({
        hub,
        upstream: engine.upstream,
        owner: this.deps.owner,
        records: this.deps.records,
        image: () => this.relayImage(engine),
        run: this.deps.run,
        docker: engine.docker,
        env: engine.env,
        logger: this.deps.logger.child({ module: 'session-relays' }),
      });
      this.sessionRelays.set(engine.instance, relays);
    }
    return relays;
  }

  /** As the daemon stops: the spares go (the sessions' relays stay for the next daemon). */
  async removeSpares(): Promise<void> {
    await Promise.all([...this.sessionRelays.values()].map((relays) => relays.removeSpares()));
  }
}
