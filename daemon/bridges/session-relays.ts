import { randomBytes } from 'node:crypto';
import { SandboxdError } from '../../shared/errors.js';
import type { Logger } from '../os/logger.js';
import { SESSION_MAX_OPEN, SESSION_RATE_PER_SECOND } from './bounds.js';
import { HUB_DIR_IN_RELAY, HUB_SOCKET_IN_RELAY } from './desktop-relay.js';
import { helperRecord, type HelperRecords } from './helper-records.js';
import { awaitReadyLine, docker, hardenedRelay, relayCommand, relayFailure, relayStatus, relayVolumeArgs, startRelay, type RelayEngine } from './relay-containers.js';

const SERVED_DIR_IN_RELAY = '/srv';
/** Relay container names: a session's is `sandboxd-relay-<16 hex>`, random. */
const RELAY_NAME = /^sandboxd-relay-[0-9a-f]{16}$/;

export interface SessionRelaysOptions extends RelayEngine {
  /** The hub's container and volume: the relays' upstream. */
  hub: string;
  /** What the hub serves (for messages). */
  upstream: string;
  owner: string;
  records: HelperRecords;
  image(): Promise<string>;
  logger: Logger;
}

/**
 * The session's relay runs as the session's uid:gid with no group beyond its own, no network, no
 * capabilities, a read-only root, no-new-privileges, and pids and memory limits; it serves a 0600
 * socket in the session's own volume, at most SESSION_MAX_OPEN connections at once and
 * SESSION_RATE_PER_SECOND new ones a second, each piped to the hub (whose volume it mounts
 * read-only: connecting needs no write).
 */
export function sessionRelayRunArgs(options: { name: string; hub: string; uid: number; gid: number; image: string; owner: string }): string[] {
  const { name } = options;
  return [
    ...hardenedRelay(name, options.owner, SESSION_MAX_OPEN + 8, '16m'),
    '--user', `${String(options.uid)}:${String(options.gid)}`,
    '--mount', `type=volume,source=${options.hub},target=${HUB_DIR_IN_RELAY},readonly`,
    '--mount', `type=volume,source=${name},target=${SERVED_DIR_IN_RELAY}`,
    ...relayCommand(options.image, HUB_SOCKET_IN_RELAY, `${SERVED_DIR_IN_RELAY}/agent.sock`, SESSION_MAX_OPEN, SESSION_RATE_PER_SECOND, '600'),
  ];
}

/**
 * What a session adds to `run`: its own volume, where the socket is `agent.sock`, read-only, so not
 * even its own container can put a listener of its own there (connecting needs no write access).
 */
export function sessionMountFlags(name: string, target: string): string[] {
  return ['--mount', `type=volume,source=${name},target=${target},readonly`];
}

/** One session's relay container (and its volume of the same name). */
export class SessionRelay {
  /** Handed to a session (a spare is not, yet). */
  assigned = false;
  /** What its bounds refused, as its last status line said (refreshed when someone lists). */
  refused = 0;
  /** Times it found its socket replaced and bound it again, and what it said last on stderr. */
  rebound = 0;
  said: string | null = null;

  constructor(
    readonly name: string,
    readonly uid: number,
    readonly gid: number,
  ) {}
}

/**
 * The sessions' own relay containers of one engine instance (docs/engines.md): made at acquire,
 * removed when the session ends, so a container whose session ended can no longer reach the agent
 * and no session shares a socket with another. One spare per container user is kept started so an
 * acquire does not wait for `docker run`. Each is recorded in `helpers.json` before it is created
 * and forgotten once container and volume are gone.
 */
export class SessionRelays {
  private readonly relays = new Set<SessionRelay>();
  /** The spare per `uid:gid`, started or starting. */
  private readonly spares = new Map<string, Promise<SessionRelay>>();
  /** Refused by relays already removed, so the count only grows. */
  private refusedBefore = 0;
  /** Relays left running for the next daemon (the daemon stops gracefully): their hub must stay too. */
  kept = 0;
  /**
   * Volumes the engine would not remove yet: a released session's container still mounts it. Tried
   * again as sessions come and go, and as the spares go.
   */
  private readonly volumesLeft = new Set<string>();

  constructor(private readonly options: SessionRelaysOptions) {}

  get inUse(): number {
    let count = 0;
    for (const relay of this.relays) if (relay.assigned) count += 1;
    return count;
  }

  /** What the sessions' relays refused (a spare serves no session, and counts nothing). */
  get refused(): number {
    let refused = this.refusedBefore;
    for (const relay of this.relays) if (relay.assigned) refused += relay.refused;
    return refused;
  }

  /** Sockets the relays found replaced and bound again, and the last thing one said about it. */
  get rebound(): { count: number; said: string | null } {
    let count = 0;
    let said: string | null = null;
    for (const relay of this.relays) {
      if (!relay.assigned) continue;
      count += relay.rebound;
      if (relay.rebound > 0) said = relay.said;
    }
    return { count, said };
  }

  /**
   * A session's relay: the spare of its user when there is one (and a new spare is started), or
   * `name` when a recorded one is served again (a running one is taken as it is).
   */
  async open(uid: number, gid: number, name?: string): Promise<SessionRelay> {
    const relay = name === undefined ? await this.take(uid, gid) : await this.resume(name, uid, gid);
    relay.assigned = true;
    return relay;
  }

  /** The session ended: its relay goes at once (its connections with it), then its volume; kept, both stay. */
  async close(relay: SessionRelay, keep: boolean): Promise<void> {
    if (!this.relays.delete(relay)) return;
    this.refusedBefore += relay.refused;
    if (keep) {
      this.kept += 1;
      return;
    }
    await this.remove(relay.name);
    await this.removeVolumesLeft();
  }

  /** Every spare goes (the hub is removed, or the daemon stops), and the volumes left, if they can. */
  async removeSpares(): Promise<void> {
    const spares = [...this.spares.values()];
    this.spares.clear();
    await Promise.all(spares.map(async (pending) => {
      const spare = await pending.catch(() => null);
      if (spare === null) return;
      this.relays.delete(spare);
      await this.remove(spare.name);
    }));
    await this.removeVolumesLeft();
  }

  private async removeVolumesLeft(): Promise<void> {
    const left = [...this.volumesLeft];
    this.volumesLeft.clear();
    await Promise.all(left.map((name) => this.removeVolume(name)));
  }

  /** Reads each relay's refusals from its status line (`sessions ls`, `tunnels ls`). */
  async refresh(): Promise<void> {
    await Promise.all([...this.relays].map(async (relay) => {
      const status = await relayStatus(this.options, relay.name);
      if (status === null) return;
      relay.refused = status.refused;
      relay.rebound = status.rebound;
      relay.said = status.said;
    }));
  }

  private async take(uid: number, gid: number): Promise<SessionRelay> {
    const key = `${String(uid)}:${String(gid)}`;
    const spare = this.spares.get(key);
    this.spares.delete(key);
    const next = this.start(newRelayName(), uid, gid);
    this.spares.set(key, next);
    next.catch(() => {
      if (this.spares.get(key) === next) this.spares.delete(key);
    });
    const taken = spare === undefined ? null : await spare.catch(() => null);
    return taken ?? this.start(newRelayName(), uid, gid);
  }

  /** A recorded relay: kept when it still runs, else started again with the same name and volume. */
  private async resume(name: string, uid: number, gid: number): Promise<SessionRelay> {
    if (!RELAY_NAME.test(name)) throw new SandboxdError('RELAY_CONTAINER_FAILED', `not a session relay's name: ${name}`);
    const running = await docker(this.options, ['inspect', '--format', '{{.State.Running}}', name]);
    if (running.exitCode === 0 && running.stdout.trim() === 'true') {
      const relay = new SessionRelay(name, uid, gid);
      this.relays.add(relay);
      return relay;
    }
    return this.start(name, uid, gid);
  }

  private async start(name: string, uid: number, gid: number): Promise<SessionRelay> {
    const { owner, records } = this.options;
    // On disk before anything is created: a daemon killed from here on leaves a record.
    await records.add(helperRecord(name, this.options.docker, this.options.env)).catch((error: unknown) => {
      throw new SandboxdError('RELAY_CONTAINER_FAILED', `cannot record relay container ${name} in the state dir: ${(error as Error).message}`);
    });
    const relay = new SessionRelay(name, uid, gid);
    this.relays.add(relay);
    try {
      // A recorded relay started again keeps its volume: the session's container mounts it.
      await docker(this.options, ['rm', '--force', name]);
      const volume = await docker(this.options, relayVolumeArgs(name, owner, uid, gid, '0700'));
      if (volume.exitCode !== 0) throw relayFailure(`cannot create volume ${name}`, volume.stderr);
      const image = await this.options.image();
      const started = await startRelay(this.options, name, sessionRelayRunArgs({ name, hub: this.options.hub, uid, gid, image, owner }));
      if (started.exitCode !== 0) throw relayFailure(`cannot start relay container ${name}`, started.stderr);
      await awaitReadyLine(this.options, name, this.options.upstream);
      return relay;
    } catch (error) {
      this.relays.delete(relay);
      await this.remove(name).catch(() => undefined);
      throw error;
    }
  }

  /**
   * The container, then its volume and record. A volume a container still mounts (a released
   * session's, still running) stays with its record, and is tried again later; the next start-up
   * removes what is left.
   */
  private async remove(name: string): Promise<void> {
    await docker(this.options, ['rm', '--force', name]);
    await this.removeVolume(name);
  }

  private async removeVolume(name: string): Promise<void> {
    const volume = await docker(this.options, ['volume', 'rm', name]);
    if (volume.exitCode !== 0) {
      this.volumesLeft.add(name);
      return;
    }
    await this.options.records.forget([name]).catch((error: unknown) => {
      this.options.logger.warn({ err: error, name }, 'cannot forget the relay container\'s record');
    });
  }
}

function newRelayName(): string {
  return `sandboxd-relay-${randomBytes(8).toString('hex')}`;
}
