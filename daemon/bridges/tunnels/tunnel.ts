import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import { SandboxdError } from '../../../shared/errors.js';
import type { BridgeInfo } from '../../../shared/contracts/bridges.js';
import type { UpstreamGate } from '../bounds.js';
import type { Bridge } from '../bridge.js';
import { BridgeStatus } from '../bridge-status.js';
import type { Logger } from '../../os/logger.js';
import type { PodmanConnection } from '../../podman/connections.js';
import { backoffMs, classifySshFailure, HALT_WORD, slotPaths, sshMasterArgs, tunnelLayout, type SelinuxMode, type SshOptions } from '../../podman/ssh-command.js';
import { MuxClient, MuxRefusal } from '../../podman/ssh-mux.js';
import type { IndexedTunnel, TunnelIndex } from '../../podman/tunnel-index.js';
import type { PathKind } from '../../podman/vm-queries.js';
import { Generation, tunnelFailure } from './generation.js';
import { TunnelSlots, type TunnelSlot } from './tunnel-slots.js';
import { TUNNEL_TRANSITIONS } from './tunnel-states.js';

/** A failing acquire is bounded at 20 s; ssh's ConnectTimeout sits well inside it. */
export const READY_TIMEOUT_MS = 15_000;
const CONNECT_TIMEOUT_SECONDS = 8;
const ALIVE_INTERVAL_SECONDS = 5;
const ALIVE_COUNT_MAX = 3;
/**
 * New root names tried in a row before the tunnel fails: a fresh random name is taken only by
 * someone who can read the daemon's state, so a third in a row means the VM's /tmp is not usable.
 */
const MAX_ROOT_CHOICES = 3;

export type SpawnSsh = (args: string[]) => ChildProcess;

export interface TunnelRecord {
  id: string;
  pid: number;
  vmDir: string;
  connection: string;
  agentSocket: string;
  /** The ssh's exact argv: a restarted daemon kills a recorded pid only while it still runs this. */
  argv: string[];
}

export interface TunnelOptions {
  id: string;
  /** The tunnel directory's name in the VM: unguessable, stable for this tunnel's life. */
  dirName: string;
  connection: PodmanConnection;
  agentSocket: string;
  /** The remote user's tunnel root in the VM, as kept in the state dir (TunnelNames). */
  vmRoot: string;
  /**
   * Daemon-private (0700): each generation's control socket and each session's host listener. Its
   * paths are on ssh's argv (the control path) and nothing in it is reachable by another user.
   */
  hostDir: string;
  /** The bound toward the agent that every session's socket shares, through any bridge. */
  /** The upstream is the daemon's own server: each session's socket names itself first (session-endpoint.ts). */
  announce?: boolean;
  gate: UpstreamGate;
  monotonic(): number;
  /** Whether the daemon stops gracefully: then the sessions' directories in the VM stay for the next one. */
  keeping(): boolean;
  /** Connects to a generation's control socket (default: OpenSSH's mux protocol, ssh-mux.ts). */
  connectMux?: (controlPath: string) => Promise<MuxClient>;
  /** Chooses and keeps another root when the VM says this one is not the remote user's own. */
  replaceRoot?: (taken: string) => Promise<string>;
  knownHostsPath: string;
  logger: Logger;
  spawnSsh: SpawnSsh;
  /** Persists the running ssh so a restarted daemon can reap it (null: nothing running). */
  onChild(record: TunnelRecord | null): void;
  /**
   * Asks podman again for this tunnel's connection, its cached answer dropped: `podman machine
   * start` can give the machine a new ssh port, and an unreachable tunnel would otherwise retry the
   * old address until it idles out.
   */
  rediscover?: () => Promise<PodmanConnection>;
  /** Where the tunnel lists itself while it runs, so plans can ask its VM what it sees. */
  index?: TunnelIndex;
  readyTimeoutMs?: number;
}

interface Waiter {
  resolve(): void;
  reject(error: SandboxdError): void;
}

/**
 * One ssh connection into a Podman machine, shared by every session with the same connection and
 * agent (STYLE 3: owns its child, an explicit state, lastError instead of throwing). The ssh is a
 * ControlMaster; each session gets its own socket in its own directory in the VM, a remote forward
 * added and cancelled over the control socket (DESIGN §6, §9), whose host end is that session's
 * bounded listener. A new generation (ssh died, a restart) forwards every session's socket again
 * at the same paths, so containers that mount them keep working. Its state changes only through
 * `status.transition()`, as TUNNEL_TRANSITIONS allows. The fields below outlive generations; what
 * belongs to one ssh child is its `Generation`'s.
 */
export class Tunnel implements Bridge, IndexedTunnel {
  readonly id: string;
  private readonly status: BridgeStatus<SandboxdError>;
  private readonly logger: Logger;
  private connection: PodmanConnection;
  /** Set when the last ssh could not reach the machine: the next launch asks podman first. */
  private stale = false;
  /** The remote user's tunnel root in the VM; another is chosen when someone else holds it. */
  private root: string;
  /** The generation that owns `agent.sock` or is about to; null between generations and once halted. */
  private generation: Generation | null = null;
  /** Generations launched so far: each one's number, in logs and its socket's name. */
  private launched = 0;
  /** The VM's SELinux mode as the latest script said it; it explains a later refused bind. */
  private selinux: SelinuxMode | null = null;
  /** The sessions' sockets; each generation publishes them all. */
  private readonly slots: TunnelSlots;
  /** The current generation publishing every slot, once it is ready. */
  private publishing: Promise<void> = Promise.resolve();
  /** Failed generations since the last ready one: how long the next backoff is. */
  private attempt = 0;
  private backoffTimer: NodeJS.Timeout | null = null;
  /** Roots chosen since the last ready generation. */
  private rootChoices = 0;
  private waiters: Waiter[] = [];

  constructor(private readonly options: TunnelOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'tunnel', tunnelId: options.id });
    this.status = new BridgeStatus(TUNNEL_TRANSITIONS, this.logger);
    this.connection = options.connection;
    this.root = options.vmRoot;
    this.slots = new TunnelSlots({
      hostDir: options.hostDir,
      upstream: options.agentSocket,
      announce: options.announce,
      gate: options.gate,
      monotonic: () => options.monotonic(),
      logger: this.logger,
      onUpstreamError: (error) => {
        this.status.lastError = this.failure(`agent ${error.message}`);
        this.logger.warn({ err: error }, 'tunnel connection to the agent failed');
      },
      ready: async () => {
        await this.whenReady();
        const generation = this.generation;
        if (generation === null || !generation.isReady) throw this.failure('the tunnel is not ready');
        return generation;
      },
      current: () => (this.ready && this.generation?.isReady === true ? this.generation : null),
    });
  }

  /** The connection the tunnel uses now (re-discovery can move it to a new address). */
  get currentConnection(): PodmanConnection {
    return this.connection;
  }

  /** The tunnel's directory in the VM, holding one directory per session. */
  get vmDir(): string {
    return tunnelLayout(this.root, this.options.dirName).dir;
  }

  /**
   * A session's own socket: published in its own directory in the VM (that directory is what its
   * container mounts), or `name`'s when a recorded one is served again.
   */
  async open(name?: string): Promise<{ slot: TunnelSlot; vmDir: string }> {
    const slot = await this.slots.open(name).catch((error: unknown) => {
      if (error instanceof SandboxdError) throw error;
      // sshd refused the bind: what it said, without the path (it is the session's capability).
      if (error instanceof MuxRefusal) throw classifySshFailure(this.connection.name, error.message.replace(/ for listen path .*$/, ''), null, this.selinux);
      throw this.failure(error instanceof Error ? error.message : String(error));
    });
    return { slot, vmDir: slotPaths(tunnelLayout(this.root, this.options.dirName), slot.name).dir };
  }

  /** The session ended: its socket stops at once; see TunnelSlots.close. */
  close(slot: TunnelSlot, keep: boolean): Promise<void> {
    return this.slots.close(slot, keep);
  }

  /** `/sys/fs/selinux/enforce` in the VM as of the last generation (null before the first). */
  get selinuxMode(): SelinuxMode | null {
    return this.selinux;
  }

  /**
   * What the VM finds at each path, asked over this tunnel's own connection (DESIGN §6: no new
   * login). Rejects when the tunnel is not ready or does not answer in time.
   */
  ask(paths: readonly string[]): Promise<Map<string, PathKind>> {
    const generation = this.generation;
    if (!this.ready || generation === null) return Promise.reject(this.failure('the tunnel is not ready'));
    return generation.ask(paths);
  }

  get ready(): boolean {
    return this.status.state === 'ready';
  }

  /** A method rather than a getter: TypeScript would keep a getter narrowed across the awaits of restart(). */
  private halted(): boolean {
    return this.status.state === 'stopped';
  }

  start(): void {
    this.options.index?.add(this);
    this.launch();
  }

  whenReady(): Promise<void> {
    const { state } = this.status;
    if (state === 'ready') return Promise.resolve();
    if (state === 'failed') return Promise.reject(this.status.lastError ?? this.failure('the tunnel failed'));
    if (state === 'stopped') return Promise.reject(this.failure('the tunnel is stopped'));
    // A session is waiting: retry now rather than at the end of the backoff.
    if (this.backoffTimer !== null) this.relaunch();
    const timeoutMs = this.options.readyTimeoutMs ?? READY_TIMEOUT_MS;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        const last = this.status.lastError;
        reject(new SandboxdError('TUNNEL_UNREACHABLE', `the tunnel over connection ${this.connection.name} was not ready within ${timeoutMs} ms${last === null ? '' : ` (last error: ${last.message})`}`));
      }, timeoutMs);
      const waiter: Waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      this.waiters.push(waiter);
    });
  }

  /**
   * Asks the VM, over the running generation's own connection, which sessions' sockets are not the
   * ones sshd bound; those are forwarded anew and the finding stays as the last error (the
   * daemon's sweep calls this).
   */
  async check(): Promise<void> {
    const generation = this.generation;
    if (!this.ready || generation === null) return;
    const replaced = await this.slots.check(generation);
    // A generation that ended meanwhile (a restart, a halt) took its questions with it.
    if (replaced.length === 0 || this.generation !== generation || this.halted()) return;
    generation.log.error({ slots: replaced }, 'session sockets in the VM were replaced; forwarded them anew');
    this.status.transition('restarting', 'session sockets in the VM were replaced');
    this.status.lastError = this.failure(`the socket of ${String(replaced.length)} session(s) in the VM was not the one sshd bound; forwarded it anew`);
    this.status.transition('ready', 'forwarded them anew');
  }

  /**
   * Hands the tunnel to a new generation, which forwards every session's socket again. The old one
   * is stopped once the new one is ready, and also when it is not: a tunnel runs one ssh of its
   * own, and one whose new generation failed retries with backoff as after any death.
   */
  async restart(): Promise<void> {
    if (this.halted()) throw this.failure('the tunnel is stopped');
    const previous = this.generation;
    this.status.transition('restarting', 'asked to restart');
    this.launch();
    try {
      await this.whenReady();
      await this.publishing;
    } finally {
      await previous?.stop(this.failure('the tunnel restarted'));
    }
  }

  /**
   * A second halt (a bridge removed while its acquire fails) finds the tunnel stopped already. As
   * the daemon stops gracefully the sessions' directories in the VM stay (the next daemon forwards
   * them again); otherwise the tunnel's directory goes with everything in it.
   */
  async halt(): Promise<void> {
    if (this.halted()) return;
    this.status.transition('stopped', 'halted');
    this.options.index?.delete(this);
    this.cancelBackoff();
    this.settle(this.failure('the tunnel was stopped'));
    const generation = this.generation;
    const keeping = this.options.keeping();
    await this.slots.closeAll(keeping && generation?.isReady === true ? generation : null);
    this.generation = null;
    await generation?.stop(this.failure('the tunnel was stopped'), keeping ? undefined : HALT_WORD);
    this.options.onChild(null);
    this.logger.info('tunnel halted');
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'tunnel',
      connection: this.connection.name,
      hostAgentSocket: this.options.agentSocket,
      socketPath: `${this.vmDir}/*/agent.sock`,
      pid: this.generation?.child.pid ?? null,
      endpoints: this.slots.inUse,
      open: this.options.gate.open,
      refused: this.slots.refused,
      ...this.status.fields(refs),
    };
  }

  /** Launches the next generation, first asking podman where the machine is now if it was unreachable. */
  private relaunch(): void {
    this.cancelBackoff();
    const rediscover = this.options.rediscover;
    if (!this.stale || rediscover === undefined) {
      this.launch();
      return;
    }
    this.stale = false;
    void rediscover()
      .then((connection) => {
        if (connection.uri !== this.connection.uri || connection.identity !== this.connection.identity) {
          this.logger.info({ from: this.connection.uri, to: connection.uri }, 'connection moved; following it');
        }
        this.connection = connection;
      })
      .catch((error: unknown) => {
        this.logger.warn({ err: error }, 'cannot re-discover the connection; retrying the old address');
      })
      .finally(() => {
        if (!this.halted() && this.generation === null) this.launch();
      });
  }

  /** A generation starting now makes a pending retry moot. */
  private launch(): void {
    this.cancelBackoff();
    this.launched += 1;
    const layout = tunnelLayout(this.root, this.options.dirName);
    // Short: ssh binds it with 17 more characters before renaming it into place.
    const controlPath = path.join(this.options.hostDir, `${this.id.slice(-8)}.${String(this.launched)}`);
    const child = this.options.spawnSsh(sshMasterArgs({ ...this.sshOptions(), controlPath }));
    this.generation = new Generation({
      tunnelId: this.id,
      number: this.launched,
      child,
      layout,
      controlPath,
      // A cold acquire's session takes it: its directory is made the moment the VM is ready.
      prepare: this.slots.forNextGeneration(),
      connectMux: this.options.connectMux ?? ((control) => MuxClient.connect(control)),
      logger: this.logger,
      events: {
        selinux: (generation, mode) => {
          if (generation === this.generation) this.selinux = mode;
        },
        ready: (generation) => {
          this.becameReady(generation);
        },
        closed: (generation, code) => {
          this.closed(generation, code);
        },
      },
    });
  }

  private becameReady(generation: Generation): void {
    if (generation !== this.generation) return;
    this.status.lastError = null;
    this.status.transition('ready', `generation ${String(generation.number)} is ready`);
    this.attempt = 0;
    this.rootChoices = 0;
    generation.log.info({ selinux: this.selinux }, 'tunnel ready');
    const { pid, spawnargs } = generation.child;
    if (pid !== undefined) {
      this.options.onChild({ id: this.id, pid, vmDir: generation.layout.dir, connection: this.connection.name, agentSocket: this.options.agentSocket, argv: spawnargs });
    }
    // First, before any waiting session publishes its own: its first command must precede theirs.
    this.publishing = this.slots.publishAll(generation).catch((error: unknown) => {
      generation.log.error({ err: error }, 'cannot forward the sessions\' sockets again');
    });
    this.settle(null);
  }

  private closed(generation: Generation, code: number | null): void {
    if (generation !== this.generation || this.halted()) return;
    this.generation = null;
    if (generation.foundTaken) {
      this.chooseRoot(generation.layout.root, generation.log);
      return;
    }
    const stderr = generation.stderrTail;
    const error = classifySshFailure(this.connection.name, stderr, code, this.selinux);
    this.stale = error.code === 'TUNNEL_UNREACHABLE';
    generation.log.warn({ code, stderr: stderr.trim().slice(-500) }, 'ssh exited');
    this.failed(error);
  }

  /** A generation ended without a tunnel: a cold start fails, a running tunnel retries with backoff. */
  private failed(error: SandboxdError): void {
    this.status.lastError = error;
    this.settle(error);
    if (this.status.state === 'starting') {
      this.status.transition('failed', error.message);
      return;
    }
    this.status.transition('restarting', error.message);
    const delay = backoffMs(this.attempt);
    this.attempt += 1;
    this.backoffTimer = setTimeout(() => {
      this.relaunch();
    }, delay);
    this.backoffTimer.unref();
  }

  /** How every login of this tunnel reaches the VM: the current address, bounded waits. */
  private sshOptions(): SshOptions {
    return {
      connection: this.connection,
      knownHostsPath: this.options.knownHostsPath,
      aliveIntervalSeconds: ALIVE_INTERVAL_SECONDS,
      aliveCountMax: ALIVE_COUNT_MAX,
      connectTimeoutSeconds: CONNECT_TIMEOUT_SECONDS,
    };
  }

  private cancelBackoff(): void {
    if (this.backoffTimer !== null) clearTimeout(this.backoffTimer);
    this.backoffTimer = null;
  }

  /**
   * The root's name is held by someone else in the VM (created first, or a symlink planted there):
   * it is left alone, and the next generation runs at once under a new name, kept in the state dir.
   * A generation started meanwhile (a restart) stands, whatever became of the new name.
   */
  private chooseRoot(taken: string, log: Logger): void {
    const replace = this.options.replaceRoot;
    this.rootChoices += 1;
    if (replace === undefined || this.rootChoices > MAX_ROOT_CHOICES) {
      log.error({ root: taken }, 'the tunnel root in the VM is not the remote user\'s own; giving up');
      this.failed(this.failure(`the tunnel root ${taken} in the VM is held by another user, as were the ${String(MAX_ROOT_CHOICES)} names chosen before it (is /tmp in the VM usable?)`));
      return;
    }
    const idle = () => !this.halted() && this.generation === null;
    replace(taken).then(
      (root) => {
        log.warn({ taken, root }, 'the tunnel root in the VM belongs to someone else; left it alone and chose a new one');
        this.root = root;
        if (idle()) this.launch();
      },
      (error: unknown) => {
        log.error({ err: error }, 'cannot keep a new tunnel root in the state dir');
        if (idle()) this.failed(this.failure(`cannot keep a new tunnel root in the state dir: ${error instanceof Error ? error.message : String(error)}`));
      },
    );
  }

  private settle(error: SandboxdError | null): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) {
      if (error === null) waiter.resolve();
      else waiter.reject(error);
    }
  }

  private failure(message: string): SandboxdError {
    return tunnelFailure(this.id, message);
  }
}
