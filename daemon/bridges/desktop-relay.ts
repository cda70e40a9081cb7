import { spawn, type ChildProcess } from 'node:child_process';
import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import { SandboxdError } from '../../shared/errors.js';
import type { Logger } from '../os/logger.js';
import { VM_ROOT, type VmUser } from '../engines/builtin-probe.js';
import { UPSTREAM_MAX_OPEN } from './bounds.js';
import type { Bridge } from './bridge.js';
import { BridgeStatus, RELAY_TRANSITIONS } from './bridge-status.js';
import { helperRecord, type HelperRecords } from './helper-records.js';
import { awaitReadyLine, docker, hardenedRelay, lastLine, relayCommand, relayFailure, relayStatus, relayVolumeArgs, startRelay, type RelayEngine } from './relay-containers.js';

const UPSTREAM_IN_HUB = '/upstream.sock';
/** Where the sessions' relays find the hub's socket (its volume, mounted read-only in them). */
export const HUB_DIR_IN_RELAY = '/hub';
export const HUB_SOCKET_IN_RELAY = `${HUB_DIR_IN_RELAY}/agent.sock`;

/** `docker wait NAME`: resolves with the container's exit code once it stops; `stop` ends the watch. */
export interface ContainerWatch {
  exited: Promise<number | null>;
  stop(): void;
}

export interface DesktopRelayOptions extends RelayEngine {
  id: string;
  /** Container and volume name, unique per sandboxd state dir and engine instance. */
  name: string;
  /** The VM's built-in agent socket (root:root 0660). */
  upstream: string;
  /** Who may connect to it, as the probe found: root, or the socket's owner (Colima: the VM's user). */
  upstreamUser?: VmUser;
  /** This daemon's owner label: the container and volume carry it, so start-up can sweep them. */
  owner: string;
  records: HelperRecords;
  /** `docker import`s the relay image on first use; resolves to its tag. */
  image(): Promise<string>;
  /**
   * The sessions' relays behind it: how many, what their bounds refused, the sockets they bound
   * again, and how many were left running for the next daemon.
   */
  sessions(): { endpoints: number; refused: number; rebound: number; said: string | null; kept: number };
  /** Whether the daemon stops gracefully: the hub then keeps running if sessions' relays were kept. */
  keeping(): boolean;
  /** Before a halt that removes the hub: the relays not handed to a session (spares) go first. */
  beforeRemoval(): Promise<void>;
  logger: Logger;
  sleep?: (ms: number) => Promise<void>;
  /** Watches the running container (default: a `docker wait` child); tests stand in for it. */
  watch?: (name: string) => ContainerWatch;
}

/**
 * The hub's volume: its socket is 0666 in a 0711 tmpfs of the hub's user (root, or the built-in
 * socket's owner), reached only by relay containers.
 */
export function hubVolumeArgs(name: string, owner: string, user: VmUser = VM_ROOT): string[] {
  return relayVolumeArgs(name, owner, user.uid, user.gid, '0711');
}

/**
 * The hub runs as a user that may connect to the built-in socket: root (gid 0: Docker Desktop's
 * socket is root:root 0660), or the socket's owner where it is another user's (Colima: the VM's
 * user, 0755 before OpenSSH 10.1 and 0600 from it, which root without capabilities may not
 * write). It has no capabilities, no network, a read-only root, no-new-privileges, and pids and
 * memory limits, and serves at most UPSTREAM_MAX_OPEN connections at once, across every session of
 * the engine.
 */
export function hubRunArgs(options: { name: string; upstream: string; user?: VmUser; image: string; owner: string }): string[] {
  const { name } = options;
  const user = options.user ?? VM_ROOT;
  return [
    ...hardenedRelay(name, options.owner, UPSTREAM_MAX_OPEN + 16, '32m'),
    '--user', `${String(user.uid)}:${String(user.gid)}`,
    '--mount', `type=bind,source=${options.upstream},target=${UPSTREAM_IN_HUB}`,
    '--mount', `type=volume,source=${name},target=${HUB_DIR_IN_RELAY}`,
    ...relayCommand(options.image, UPSTREAM_IN_HUB, HUB_SOCKET_IN_RELAY, UPSTREAM_MAX_OPEN, 0, '666'),
  ];
}

/** `docker wait` as a child of its own: it holds no subprocess slot for as long as the hub runs. */
function dockerWait(dockerPath: string, env: Record<string, string>): (name: string) => ContainerWatch {
  return (name) => {
    const child: ChildProcess = spawn(dockerPath, ['wait', name], { env, stdio: ['ignore', 'pipe', 'ignore'] });
    let stdout = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => {
      child.once('error', () => {
        resolve(null);
      });
      child.once('close', () => {
        const code = Number.parseInt(stdout.trim(), 10);
        resolve(Number.isNaN(code) ? null : code);
      });
    });
    return { exited, stop: () => child.kill() };
  };
}

/**
 * The hub of one engine instance (docs/engines.md, "Docker Desktop"): the one container that holds
 * gid 0 and reaches the VM's built-in agent socket, and the bound toward it across sessions. Each
 * session gets a relay container of its own (session-relays.ts) whose upstream is the hub's socket;
 * session containers never mount the hub's volume or the VM socket. While it runs a `docker wait`
 * watches it: one that stopped (the engine restarted, someone removed it) is `failed` until the
 * next session asks for it. A hub a previous daemon left running (it stopped gracefully, its
 * sessions' relays still serving) is taken over as it is. When the engine restarts, the next
 * session identifies a new instance and gets a new hub, while this one idles out.
 */
export class DesktopRelay implements Bridge {
  readonly id: string;
  private readonly status: BridgeStatus;
  private ready: Promise<void> = Promise.resolve();
  /** The running container's watch; null while none runs (starting, halted, stopped). */
  private watching: ContainerWatch | null = null;
  /** The running hub stopped by itself: the next session that asks starts it again. */
  private stoppedByItself = false;
  /** Connections it holds toward the agent, as its last status line said (`tunnels ls` asks). */
  private open = 0;
  /**
   * Launches so far: a stop noticed while a later launch ran is not that launch's, and a launch
   * that a restart or halt overtook leaves the state alone.
   */
  private launches = 0;
  private readonly logger: Logger;

  constructor(private readonly options: DesktopRelayOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'desktop-relay', tunnelId: options.id });
    this.status = new BridgeStatus(RELAY_TRANSITIONS, this.logger);
  }

  get name(): string {
    return this.options.name;
  }

  start(): void {
    this.ready = this.launch();
    this.ready.catch(() => undefined);
  }

  whenReady(): Promise<void> {
    if (this.stoppedByItself) {
      this.stoppedByItself = false;
      this.relaunch('a session asked for the hub');
    }
    return this.ready;
  }

  async restart(): Promise<void> {
    this.relaunch('asked to restart');
    await this.ready;
  }

  /**
   * A second halt (a bridge removed while its acquire fails) finds the hub stopped already. As the
   * daemon stops gracefully with sessions' relays kept, the hub keeps running: they still reach the
   * agent through it, and the next daemon takes it over.
   */
  async halt(): Promise<void> {
    if (this.status.state === 'stopped') return;
    this.status.transition('stopped', 'halted');
    this.unwatch();
    if (this.options.keeping() && this.options.sessions().kept > 0) {
      this.logger.info('hub left running for the sessions\' relays');
      return;
    }
    await this.options.beforeRemoval();
    await docker(this.options, ['rm', '--force', this.options.name]);
    await this.removeVolume();
    this.logger.info('hub halted');
  }

  /** Reads what its status line says now (`tunnels ls`). */
  async refresh(): Promise<void> {
    const said = await relayStatus(this.options, this.options.name);
    if (said !== null) this.open = said.open;
  }

  /** A session relay that found its socket replaced bound it again itself: it counts as a restart here. */
  describe(refs: number): BridgeInfo {
    const sessions = this.options.sessions();
    const fields = this.status.fields(refs);
    return {
      id: this.id,
      kind: 'container-relay',
      connection: null,
      hostAgentSocket: this.options.upstream,
      socketPath: 'sandboxd-relay-*:/agent.sock',
      pid: null,
      endpoints: sessions.endpoints,
      open: this.open,
      refused: sessions.refused,
      ...fields,
      restarts: fields.restarts + sessions.rebound,
      lastError: fields.lastError ?? sessions.said,
    };
  }

  private relaunch(why: string): void {
    this.status.transition('restarting', why);
    this.start();
  }

  private async launch(): Promise<void> {
    const { name, owner, records } = this.options;
    this.launches += 1;
    const launch = this.launches;
    const overtaken = (): boolean => launch !== this.launches || this.status.state === 'stopped';
    this.unwatch();
    /** The container this launch started, by id: a newer launch's has the same name. */
    let container: string | null = null;
    try {
      // On disk before anything is created: a daemon killed from here on leaves a record.
      await records.add(helperRecord(name, this.options.docker, this.options.env)).catch((error: unknown) => {
        throw new SandboxdError('RELAY_CONTAINER_FAILED', `cannot record relay container ${name} in the state dir: ${(error as Error).message}`);
      });
      const image = await this.options.image();
      if (overtaken()) return;
      if (await this.adopt(image)) {
        this.logger.info({ name }, 'took over the hub a previous daemon left running');
      } else {
        // Whatever a previous daemon left under this name is ours (the name carries our state dir).
        // Its volume is kept while the sessions' relays mount it: they find the new socket there.
        await docker(this.options, ['rm', '--force', name]);
        await docker(this.options, hubVolumeArgs(name, owner, this.options.upstreamUser));
        const started = await startRelay(this.options, name, hubRunArgs({ name, upstream: this.options.upstream, user: this.options.upstreamUser, image, owner }));
        if (started.exitCode !== 0) throw relayFailure(`cannot start relay container ${name}`, started.stderr);
        const id = started.stdout.trim();
        container = id === '' ? null : id;
        if (!overtaken()) await awaitReadyLine(this.options, name, this.options.upstream, this.options.sleep);
      }
      if (overtaken()) {
        await this.abandon(container);
        return;
      }
      this.watch();
      this.status.transition('ready', 'its ready line');
      this.logger.info({ name }, 'hub ready');
    } catch (error) {
      this.status.lastError = error as Error;
      this.logger.error({ err: error }, 'hub failed');
      if (overtaken()) await this.abandon(container);
      else this.status.transition('failed', (error as Error).message);
      throw error;
    }
  }

  /** A hub of this name that runs sandboxd's current image is the one to keep. */
  private async adopt(image: string): Promise<boolean> {
    const found = await docker(this.options, ['inspect', '--format', '{{.State.Running}} {{.Config.Image}}', this.options.name]);
    return found.exitCode === 0 && found.stdout.trim() === `true ${image}`;
  }

  /**
   * Undoes what a launch that a restart or halt overtook made. Its container goes by its own id:
   * the name may be a newer launch's already. After a halt, the volume and record go too.
   */
  private async abandon(container: string | null): Promise<void> {
    try {
      if (container !== null) await docker(this.options, ['rm', '--force', container]);
      if (this.status.state === 'stopped') await this.removeVolume();
    } catch (error) {
      this.logger.warn({ err: error, container }, 'cannot remove what an overtaken launch made');
    }
  }

  /**
   * Fails while a relay container still mounts the volume: the record stays, so the next hub of
   * that name reuses it or the next start-up removes it.
   */
  private async removeVolume(): Promise<void> {
    const { name } = this.options;
    const volume = await docker(this.options, ['volume', 'rm', name]);
    if (volume.exitCode !== 0) return;
    await this.options.records.forget([name]).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'cannot forget the relay container\'s record');
    });
  }

  private watch(): void {
    const watch = (this.options.watch ?? dockerWait(this.options.docker, this.options.env))(this.options.name);
    this.watching = watch;
    void watch.exited.then((code) => this.stopped(watch, code));
  }

  private unwatch(): void {
    this.watching?.stop();
    this.watching = null;
  }

  /** The hub container stopped while nothing here stopped it. */
  private async stopped(watch: ContainerWatch, code: number | null): Promise<void> {
    if (watch !== this.watching) return;
    this.watching = null;
    const { name } = this.options;
    const launches = this.launches;
    const said = lastLine((await docker(this.options, ['logs', '--tail', '5', name]).catch(() => null))?.stderr ?? '');
    // Halted, or restarted by hand, meanwhile.
    if (this.status.state !== 'ready' || this.launches !== launches) return;
    this.status.lastError = new Error(`relay container ${name} stopped${code === null ? '' : ` (exit ${String(code)})`}${said === '' ? '' : `: ${said}`}`);
    this.logger.warn({ name, code, said }, 'hub stopped');
    this.status.transition('failed', 'it stopped by itself');
    this.stoppedByItself = true;
  }
}
