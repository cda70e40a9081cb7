import { spawn, type ChildProcess } from 'node:child_process';
import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { VM_ROOT, type VmUser } from '../engines/builtin-probe.js';
import type { Bridge } from './bridge.js';
import { BridgeStatus, RELAY_TRANSITIONS } from './bridge-status.js';
import { helperLabels, helperRecord, type HelperRecords } from './helper-records.js';
import { RELAY_BINARY_IN_IMAGE } from './relay-image.js';

const COMMAND_TIMEOUT_MS = 30_000;
const READY_TIMEOUT_MS = 10_000;
const READY_POLL_MS = 100;
const READY_LINE = 'sandboxd-relay ready';
const UPSTREAM_IN_RELAY = '/upstream.sock';
const SERVED_DIR_IN_RELAY = '/srv';
/** The relay's exit code when its socket is not the one it bound (sandboxd-relay.c). */
const EXIT_REPLACED = 3;
/** Re-creations after a replaced socket with no acquire in between; past it the relay stays failed. */
const MAX_REPLACED_RELAUNCHES = 3;
/**
 * Agent connections served at once: git and ssh open a handful each. Past it the relay closes a
 * connection instead of forking for it, so a flood from one session costs neither pids nor memory.
 */
export const RELAY_MAX_CONNECTIONS = 128;
/** The relay, its children, and room for children that ended but are not reaped yet. */
const RELAY_LIMITS = ['--pids-limit', String(RELAY_MAX_CONNECTIONS + 16), '--memory', '64m'];

/** `docker wait NAME`: resolves with the container's exit code once it stops; `stop` ends the watch. */
export interface ContainerWatch {
  exited: Promise<number | null>;
  stop(): void;
}

export interface DesktopRelayOptions {
  id: string;
  /** Container and volume name, unique per sandboxd state dir, engine instance and user. */
  name: string;
  /** The VM's built-in agent socket (root:root 0660, or another user's: Colima's). */
  upstream: string;
  /** Who may connect to it, as the probe found: root, or the socket's owner. */
  upstreamUser?: VmUser;
  uid: number;
  gid: number;
  /** This daemon's owner label: the container and volume carry it, so start-up can sweep them. */
  owner: string;
  records: HelperRecords;
  /** `docker import`s the relay image on first use; resolves to its tag. */
  image(): Promise<string>;
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
  logger: Logger;
  sleep?: (ms: number) => Promise<void>;
  /** Watches the running container (default: a `docker wait` child); tests stand in for it. */
  watch?: (name: string) => ContainerWatch;
}

/**
 * The volume's tmpfs belongs to the relay's user; it holds one socket, so it is sized for little
 * more. Run as the session's user, only that user may reach it (0700); run as the socket's owner
 * (Colima), the session's user may only pass through it (0711) to the socket.
 */
export function volumeCreateArgs(name: string, uid: number, gid: number, owner: string, upstreamUser: VmUser = VM_ROOT): string[] {
  const asOwner = upstreamUser.uid !== 0;
  const tmpfs = asOwner ? `o=uid=${String(upstreamUser.uid)},gid=${String(upstreamUser.gid)},mode=0711` : `o=uid=${String(uid)},gid=${String(gid)},mode=0700`;
  return ['volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', `${tmpfs},size=64k,nr_inodes=16`, ...helperLabels(owner, 'relay'), name];
}

/**
 * The relay runs with no network, no capabilities, a read-only root, no-new-privileges, and pids and
 * memory limits, as a user that may connect to the built-in socket: where root may (Docker Desktop:
 * root:root 0660), as the session's uid:gid holding gid 0 itself, serving a 0600 socket; where only
 * its owner may (Colima: the VM's user, 0600 or 0755), as that owner, serving a 0666 socket for the
 * session's user. The session never holds gid 0 or the owner's uid.
 */
export function relayRunArgs(options: { name: string; upstream: string; upstreamUser?: VmUser; uid: number; gid: number; image: string; owner: string }): string[] {
  const { name } = options;
  const upstreamUser = options.upstreamUser ?? VM_ROOT;
  const asOwner = upstreamUser.uid !== 0;
  return [
    'run', '--detach', '--name', name, ...helperLabels(options.owner, 'relay'), '--network', 'none', '--cap-drop', 'ALL', '--read-only',
    '--security-opt', 'no-new-privileges', ...RELAY_LIMITS,
    ...(asOwner ? ['--user', `${String(upstreamUser.uid)}:${String(upstreamUser.gid)}`] : ['--user', `${String(options.uid)}:${String(options.gid)}`, '--group-add', '0']), '--pull', 'never',
    '--mount', `type=bind,source=${options.upstream},target=${UPSTREAM_IN_RELAY}`,
    '--mount', `type=volume,source=${name},target=${SERVED_DIR_IN_RELAY}`,
    '--entrypoint', RELAY_BINARY_IN_IMAGE, options.image, 'serve', UPSTREAM_IN_RELAY, `${SERVED_DIR_IN_RELAY}/agent.sock`, String(RELAY_MAX_CONNECTIONS), ...(asOwner ? ['666'] : []),
  ];
}

/**
 * What a session adds to `run`: the volume, where the socket is `agent.sock`, read-only, so no
 * session can put a listener of its own there for the others (connecting needs no write access).
 */
export function sessionMountFlags(name: string, target: string): string[] {
  return ['--mount', `type=volume,source=${name},target=${target},readonly`];
}

/** `docker wait` as a child of its own: it holds no subprocess slot for as long as the relay runs. */
function dockerWait(docker: string, env: Record<string, string>): (name: string) => ContainerWatch {
  return (name) => {
    const child: ChildProcess = spawn(docker, ['wait', name], { env, stdio: ['ignore', 'pipe', 'ignore'] });
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

/** The last line a command printed on stderr, for a message. */
function lastLine(stderr: string): string {
  return clip(stderr.trim().split('\n').filter((line) => line !== '').at(-1) ?? '');
}

/**
 * Why the relay could not reach the engine's agent socket (`upstream` in the VM, mounted into the
 * relay), from its `connect <path>: <strerror>` line: the socket's owner and mode decide who may
 * connect, and they differ by engine. `as` names the user the relay ran as.
 */
export function upstreamReason(line: string, as: string, upstream: string): string | null {
  if (!line.startsWith('sandboxd-relay: connect ')) return null;
  if (line.endsWith('Permission denied')) {
    return `permission denied: the engine's agent socket ${upstream} is not writable by ${as} (older Docker Desktop made it root's, mode 0755; Colima's belongs to the VM's user)`;
  }
  if (line.endsWith('Connection refused') || line.endsWith('No such file or directory')) return `no agent listens at ${upstream} in the engine's VM`;
  return null;
}

/**
 * The shared relay container of one engine instance and container user (docs/engines.md, "Docker
 * Desktop"). Sessions mount its volume, never the VM socket, and never hold gid 0 themselves.
 * While it runs a `docker wait` watches it: a relay whose socket was replaced exits, and is
 * re-created at once with what it said as `lastError`; one that stopped otherwise (the engine
 * restarted, someone removed it) is `failed` until the next session asks for it. When the engine
 * restarts, the next session identifies a new instance and gets a new relay, while this one idles
 * out.
 */
export class DesktopRelay implements Bridge {
  readonly id: string;
  private readonly status: BridgeStatus;
  private ready: Promise<void> = Promise.resolve();
  /** The running container's watch; null while none runs (starting, halted, stopped). */
  private watching: ContainerWatch | null = null;
  /** The running relay stopped by itself: the next session that asks starts it again. */
  private stoppedByItself = false;
  private replacedRelaunches = 0;
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

  get volume(): string {
    return this.options.name;
  }

  start(): void {
    this.ready = this.launch();
    this.ready.catch(() => undefined);
  }

  whenReady(): Promise<void> {
    this.replacedRelaunches = 0;
    if (this.stoppedByItself) {
      this.stoppedByItself = false;
      this.relaunch('a session asked for the relay');
    }
    return this.ready;
  }

  async restart(): Promise<void> {
    this.relaunch('asked to restart');
    await this.ready;
  }

  /** A second halt (a bridge removed while its acquire fails) finds the relay stopped already. */
  async halt(): Promise<void> {
    if (this.status.state === 'stopped') return;
    this.status.transition('stopped', 'halted');
    this.unwatch();
    await this.docker(['rm', '--force', this.options.name]);
    await this.removeVolume();
    this.logger.info('relay container halted');
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'container-relay',
      connection: null,
      hostAgentSocket: this.options.upstream,
      socketPath: `${this.options.name}:/agent.sock`,
      pid: null,
      ...this.status.fields(refs),
    };
  }

  private relaunch(why: string): void {
    this.status.transition('restarting', why);
    this.start();
  }

  private async launch(): Promise<void> {
    const { name, uid, gid, owner, docker, env } = this.options;
    this.launches += 1;
    const launch = this.launches;
    const overtaken = (): boolean => launch !== this.launches || this.status.state === 'stopped';
    this.unwatch();
    /** The container this launch started, by id: a newer launch's has the same name. */
    let container: string | null = null;
    try {
      // On disk before anything is created: a daemon killed from here on leaves a record.
      await this.options.records.add(helperRecord(name, docker, env)).catch((error: unknown) => {
        throw new SandboxdError('RELAY_CONTAINER_FAILED', `cannot record relay container ${name} in the state dir: ${(error as Error).message}`);
      });
      // Whatever a previous daemon left under this name is ours (the name carries our state dir).
      await this.docker(['rm', '--force', name]);
      // A new volume gets this release's options and labels; one a session still mounts is reused.
      await this.docker(['volume', 'rm', name]);
      const volume = await this.docker(volumeCreateArgs(name, uid, gid, owner, this.options.upstreamUser));
      if (volume.exitCode !== 0) throw this.failure(`cannot create volume ${name}`, volume.stderr);
      const image = await this.options.image();
      if (overtaken()) {
        await this.abandon(null);
        return;
      }
      const started = await this.docker(relayRunArgs({ name, upstream: this.options.upstream, upstreamUser: this.options.upstreamUser, uid, gid, image, owner }));
      if (started.exitCode !== 0) throw this.failure(`cannot start relay container ${name}`, started.stderr);
      const id = started.stdout.trim();
      container = id === '' ? null : id;
      if (!overtaken()) await this.awaitReadyLine();
      if (overtaken()) {
        await this.abandon(container);
        return;
      }
      this.watch();
      this.status.transition('ready', 'its ready line');
      this.logger.info({ name }, 'relay container ready');
    } catch (error) {
      this.status.lastError = error as Error;
      this.logger.error({ err: error }, 'relay container failed');
      if (overtaken()) await this.abandon(container);
      else this.status.transition('failed', (error as Error).message);
      throw error;
    }
  }

  /**
   * Undoes what a launch that a restart or halt overtook made. Its container goes by its own id:
   * the name may be a newer launch's already. After a halt, which may have run before this launch
   * made the volume, the volume and its record go too; after a restart they are the newer launch's.
   */
  private async abandon(container: string | null): Promise<void> {
    try {
      if (container !== null) await this.docker(['rm', '--force', container]);
      if (this.status.state === 'stopped') await this.removeVolume();
    } catch (error) {
      this.logger.warn({ err: error, container }, 'cannot remove what an overtaken launch made');
    }
  }

  /**
   * Fails while a session container still mounts the volume: the record stays, so the next relay
   * of that name reuses it or the next start-up removes it.
   */
  private async removeVolume(): Promise<void> {
    const { name } = this.options;
    const volume = await this.docker(['volume', 'rm', name]);
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

  /** The relay container stopped while nothing here stopped it. */
  private async stopped(watch: ContainerWatch, code: number | null): Promise<void> {
    if (watch !== this.watching) return;
    this.watching = null;
    const { name } = this.options;
    const launches = this.launches;
    const said = lastLine((await this.docker(['logs', '--tail', '5', name]).catch(() => null))?.stderr ?? '');
    // Halted, or restarted by hand, meanwhile.
    if (this.status.state !== 'ready' || this.launches !== launches) return;
    this.status.lastError = new Error(`relay container ${name} stopped${code === null ? '' : ` (exit ${String(code)})`}${said === '' ? '' : `: ${said}`}`);
    this.logger.warn({ name, code, said }, 'relay container stopped');
    if (code === EXIT_REPLACED && this.replacedRelaunches < MAX_REPLACED_RELAUNCHES) {
      this.replacedRelaunches += 1;
      this.relaunch('its socket was replaced');
      return;
    }
    this.status.transition('failed', 'it stopped by itself');
    this.stoppedByItself = true;
  }

  /** The relay prints its ready line once it listens; `docker run -d` returns before that. */
  private async awaitReadyLine(): Promise<void> {
    const sleep = this.options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
    // Monotonic: a wall clock stepped meanwhile would end the wait at once or make it endless.
    const deadline = performance.now() + READY_TIMEOUT_MS;
    for (;;) {
      const logs = await this.docker(['logs', this.options.name]);
      if (logs.stdout.includes(READY_LINE)) return;
      if (logs.stderr.includes('sandboxd-relay:') || performance.now() > deadline) {
        const reason = upstreamReason(lastLine(logs.stderr), this.relayUser(), this.options.upstream);
        throw this.failure(`relay container ${this.options.name} did not become ready`, logs.stderr, reason);
      }
      await sleep(READY_POLL_MS);
    }
  }

  /** Who the relay runs as, for a message. */
  private relayUser(): string {
    const { uid, upstreamUser } = this.options;
    return upstreamUser !== undefined && upstreamUser.uid !== 0 ? `uid ${String(upstreamUser.uid)} (its owner, as the probe found)` : `uid ${String(uid)} with group 0`;
  }

  private docker(args: string[]) {
    return this.options.run(this.options.docker, args, { env: this.options.env, timeoutMs: COMMAND_TIMEOUT_MS });
  }

  private failure(what: string, stderr: string, reason: string | null = null): SandboxdError {
    const detail = lastLine(stderr);
    return new SandboxdError('RELAY_CONTAINER_FAILED', `${what}${detail === '' ? '' : `: ${detail}`}${reason === null ? '' : ` (${reason})`}`);
  }
}
