import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { SandboxdError } from '../../../shared/errors.js';
import type { BridgeInfo, BridgeState } from '../../../shared/contracts/bridges.js';
import type { Bridge } from '../bridge.js';
import type { Logger } from '../../os/logger.js';
import type { PodmanConnection } from '../../podman/connections.js';
import {
  backoffMs,
  classifySshFailure,
  HALT_WORD,
  leftoverScript,
  parseSelinux,
  READY_MARKER,
  remoteScript,
  ROOT_TAKEN_MARKER,
  SEEN_MARKER,
  SELINUX_MARKER,
  sshArgs,
  sshProbeArgs,
  tunnelLayout,
  UNLOCKED_MARKER,
  type SelinuxMode,
  type TunnelLayout,
} from '../../podman/ssh-command.js';
import type { IndexedTunnel, TunnelIndex } from '../../podman/tunnel-index.js';
import { VmQueries, type PathKind } from '../../podman/vm-queries.js';

/** The issue bounds a failing acquire at 20 s; ssh's ConnectTimeout sits well inside it. */
export const READY_TIMEOUT_MS = 15_000;
const CONNECT_TIMEOUT_SECONDS = 8;
const ALIVE_INTERVAL_SECONDS = 5;
const ALIVE_COUNT_MAX = 3;
/** After stdin closes, the remote script cleans up and ssh exits; past this we signal it. */
const GRACEFUL_EXIT_MS = 2_000;
/** A whole login plus one `rm`: as long as a connect may take. */
const CLEANUP_LOGIN_MS = (CONNECT_TIMEOUT_SECONDS + 2) * 1_000;
/**
 * Last logins a stopped tunnel makes for its leftovers, at most this far apart: together they span
 * an sshd restart on a loaded machine (about 15 s), which is when generations die unpublished.
 */
const MAX_CLEANUP_LOGINS = 10;
const CLEANUP_BACKOFF_CAP_MS = 2_000;
const STDERR_KEEP_BYTES = 4_096;
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
 * One `ssh -R` tunnel into a Podman machine, shared by every session with the same connection and
 * agent (STYLE 3: owns its child, an explicit state, lastError instead of throwing). Each
 * generation binds a fresh socket name and repoints `<dir>/agent.sock`, so containers that mount
 * `<dir>` keep working across restarts.
 */
export class Tunnel implements Bridge, IndexedTunnel {
  readonly id: string;
  private state: BridgeState = 'starting';
  private child: ChildProcess | null = null;
  private generation = 0;
  private attempt = 0;
  private restarts = 0;
  private lastError: SandboxdError | null = null;
  private selinux: SelinuxMode | null = null;
  private connection: PodmanConnection;
  /** Set when the last ssh could not reach the machine: the next launch asks podman first. */
  private stale = false;
  private queries: VmQueries | null = null;
  private backoffTimer: NodeJS.Timeout | null = null;
  private waiters: Waiter[] = [];
  /** Bind paths of generations that closed before publishing: the next generation removes them. */
  private leftovers: string[] = [];
  private readonly published = new WeakSet<ChildProcess>();
  /** The leftovers each generation's script was given to remove. */
  private readonly cleaning = new WeakMap<ChildProcess, readonly string[]>();
  /** Generations whose script found the root taken: their close chooses another root. */
  private readonly foundTaken = new WeakSet<ChildProcess>();
  /** Roots chosen since the last ready generation. */
  private rootChoices = 0;
  private readonly createdAt = new Date().toISOString();
  private readonly logger: Logger;
  private root: string;
  private dir: string;

  constructor(private readonly options: TunnelOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'tunnel', tunnelId: options.id });
    this.connection = options.connection;
    this.root = options.vmRoot;
    this.dir = tunnelLayout(options.vmRoot, options.dirName, 0, '').dir;
  }

  /** The connection the tunnel uses now (re-discovery can move it to a new address). */
  get currentConnection(): PodmanConnection {
    return this.connection;
  }

  /** The VM directory containers mount. */
  get vmDir(): string {
    return this.dir;
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
    if (this.state !== 'ready' || this.queries === null) return Promise.reject(this.failure('the tunnel is not ready'));
    return this.queries.ask(paths);
  }

  get ready(): boolean {
    return this.state === 'ready';
  }

  start(): void {
    this.options.index?.add(this);
    this.launch();
  }

  whenReady(): Promise<void> {
    if (this.state === 'ready') return Promise.resolve();
    if (this.state === 'failed') return Promise.reject(this.lastError ?? this.failure('the tunnel failed'));
    if (this.state === 'stopped') return Promise.reject(this.failure('the tunnel is stopped'));
    // A session is waiting: retry now rather than at the end of the backoff.
    if (this.backoffTimer !== null) {
      clearTimeout(this.backoffTimer);
      this.backoffTimer = null;
      this.relaunch();
    }
    const timeoutMs = this.options.readyTimeoutMs ?? READY_TIMEOUT_MS;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new SandboxdError('TUNNEL_UNREACHABLE', `the tunnel over connection ${this.connection.name} was not ready within ${timeoutMs} ms${this.lastError === null ? '' : ` (last error: ${this.lastError.message})`}`));
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
   * Asks the VM, over the running generation's own connection, whether `agent.sock` still leads
   * to the socket that generation published; when not, a new generation publishes its own and the
   * finding stays as the last error (the daemon's sweep calls this).
   */
  async check(): Promise<void> {
    const queries = this.queries;
    if (this.state !== 'ready' || queries === null) return;
    if (await queries.intact()) return;
    // A generation that ended meanwhile (a restart, a halt) took its queries with it.
    if (this.queries !== queries) return;
    const found = this.failure('agent.sock in the VM no longer led to the socket this tunnel published; re-created it');
    this.logger.error({ generation: this.generation }, 'the tunnel socket in the VM was replaced; re-creating it');
    await this.restart();
    this.lastError = found;
  }

  async restart(): Promise<void> {
    if (this.state === 'stopped') throw this.failure('the tunnel is stopped');
    const previous = this.child;
    this.restarts += 1;
    this.state = 'restarting';
    if (this.backoffTimer !== null) clearTimeout(this.backoffTimer);
    this.backoffTimer = null;
    this.launch();
    await this.whenReady();
    // The new generation already owns agent.sock; the old one only removes its own socket.
    if (previous !== null) await stopChild(previous);
  }

  async halt(): Promise<void> {
    this.state = 'stopped';
    this.options.index?.delete(this);
    if (this.backoffTimer !== null) clearTimeout(this.backoffTimer);
    this.backoffTimer = null;
    this.settle(this.failure('the tunnel was stopped'));
    const child = this.child;
    this.child = null;
    this.queries?.close(this.failure('the tunnel was stopped'));
    this.queries = null;
    if (child !== null) await stopChild(child, HALT_WORD);
    this.options.onChild(null);
    const leftovers = this.leftovers;
    this.leftovers = [];
    // Only the first login is awaited: a session told that the tunnel failed is not kept waiting
    // for a VM that is down, and the retries outlive the halt.
    if (leftovers.length > 0 && !(await this.removeLeftovers(leftovers))) void this.retryLeftovers(leftovers);
    this.logger.info('tunnel halted');
  }

  /**
   * Bind sockets of generations that died unpublished are otherwise removed by the next
   * generation's script; a stopping tunnel has none, so a last login does it. Such a generation
   * mostly died because the VM's sshd went away, so that login is often refused at first: it is
   * retried with backoff, a bounded number of times.
   */
  private async retryLeftovers(leftovers: readonly string[]): Promise<void> {
    for (let attempt = 1; attempt < MAX_CLEANUP_LOGINS; attempt += 1) {
      this.logger.warn({ attempt }, 'the login that removes bind sockets left by generations that died failed; trying again');
      await new Promise<void>((resolve) => setTimeout(resolve, backoffMs(attempt - 1, undefined, CLEANUP_BACKOFF_CAP_MS)).unref());
      if (await this.removeLeftovers(leftovers)) return;
    }
    this.logger.error({ leftovers }, `${String(MAX_CLEANUP_LOGINS)} logins to the VM failed; bind sockets of generations that died stay beside the tunnel root`);
  }

  /** One login that removes them; true once the VM ran it. */
  private async removeLeftovers(leftovers: readonly string[]): Promise<boolean> {
    const child = this.options.spawnSsh(
      sshProbeArgs({
        connection: this.connection,
        knownHostsPath: this.options.knownHostsPath,
        aliveIntervalSeconds: ALIVE_INTERVAL_SECONDS,
        aliveCountMax: ALIVE_COUNT_MAX,
        connectTimeoutSeconds: CONNECT_TIMEOUT_SECONDS,
      }),
    );
    child.once('error', () => undefined);
    child.stdin?.on('error', () => undefined);
    child.stdin?.write(`${leftoverScript(leftovers)}\n`);
    await stopChild(child, undefined, CLEANUP_LOGIN_MS);
    // The script ends in `exit 0`; ssh answers 255 for a login that failed.
    if (child.exitCode !== 0) return false;
    this.logger.info({ leftovers: leftovers.length }, 'removed bind sockets left by generations that died');
    return true;
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'tunnel',
      connection: this.connection.name,
      hostAgentSocket: this.options.agentSocket,
      socketPath: `${this.dir}/agent.sock`,
      state: this.state === 'ready' && refs === 0 ? 'draining' : this.state,
      refs,
      pid: this.child?.pid ?? null,
      restarts: this.restarts,
      createdAt: this.createdAt,
      lastError: this.lastError?.message ?? null,
    };
  }

  /** Launches the next generation, first asking podman where the machine is now if it was unreachable. */
  private relaunch(): void {
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
        if (this.state !== 'stopped' && this.child === null) this.launch();
      });
  }

  private launch(): void {
    this.generation += 1;
    // 16 random bytes: the bind path sits in the VM's /tmp, where any user can list it.
    const layout = tunnelLayout(this.root, this.options.dirName, this.generation, randomBytes(16).toString('hex'));
    const args = sshArgs({
      connection: this.connection,
      agentSocket: this.options.agentSocket,
      layout,
      knownHostsPath: this.options.knownHostsPath,
      aliveIntervalSeconds: ALIVE_INTERVAL_SECONDS,
      aliveCountMax: ALIVE_COUNT_MAX,
      connectTimeoutSeconds: CONNECT_TIMEOUT_SECONDS,
    });
    const child = this.options.spawnSsh(args);
    this.child = child;
    this.watch(child, layout);
    // The script, with every VM path in it, goes on stdin: never on an argv in the VM.
    const leftovers = [...this.leftovers];
    this.cleaning.set(child, leftovers);
    child.stdin?.write(`${remoteScript(layout, leftovers)}\n`);
  }

  private watch(child: ChildProcess, layout: TunnelLayout): void {
    let stderr = '';
    const log = this.logger.child({ generation: this.generation, pid: child.pid });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-STDERR_KEEP_BYTES);
    });
    let pending = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) this.onLine(child, layout, line, log);
    });
    // ssh must never see EOF on stdin until we want the remote side to clean up.
    child.stdin?.on('error', () => undefined);
    child.once('error', (error: NodeJS.ErrnoException) => {
      stderr += error.code === 'ENOENT' ? 'ssh: command not found (install OpenSSH)' : error.message;
    });
    child.once('close', (code) => {
      if (!this.published.has(child)) this.leftovers.push(layout.bindPath);
      if (child !== this.child || this.state === 'stopped') return;
      this.child = null;
      this.queries?.close(this.failure('the ssh connection closed'));
      this.queries = null;
      if (this.foundTaken.has(child)) {
        this.chooseRoot(layout.root, log);
        return;
      }
      const error = classifySshFailure(this.connection.name, stderr, code, this.selinux);
      this.stale = error.code === 'TUNNEL_UNREACHABLE';
      log.warn({ code, stderr: stderr.trim().slice(-500) }, 'ssh exited');
      this.failed(error);
    });
  }

  /** A generation ended without a tunnel: a cold start fails, a running tunnel retries with backoff. */
  private failed(error: SandboxdError): void {
    this.lastError = error;
    this.settle(error);
    if (this.state === 'starting') {
      this.state = 'failed';
      return;
    }
    this.state = 'restarting';
    this.restarts += 1;
    const delay = backoffMs(this.attempt);
    this.attempt += 1;
    this.backoffTimer = setTimeout(() => {
      this.backoffTimer = null;
      this.relaunch();
    }, delay);
    this.backoffTimer.unref();
  }

  /**
   * The root's name is held by someone else in the VM (created first, or a symlink planted there):
   * it is left alone, and the next generation runs at once under a new name, kept in the state dir.
   */
  private chooseRoot(taken: string, log: Logger): void {
    const replace = this.options.replaceRoot;
    this.rootChoices += 1;
    if (replace === undefined || this.rootChoices > MAX_ROOT_CHOICES) {
      log.error({ root: taken }, 'the tunnel root in the VM is not the remote user\'s own; giving up');
      this.failed(this.failure(`the tunnel root ${taken} in the VM is held by another user, as were the ${String(MAX_ROOT_CHOICES)} names chosen before it (is /tmp in the VM usable?)`));
      return;
    }
    replace(taken).then(
      (root) => {
        log.warn({ taken, root }, 'the tunnel root in the VM belongs to someone else; left it alone and chose a new one');
        this.root = root;
        this.dir = tunnelLayout(root, this.options.dirName, 0, '').dir;
        if (this.state !== 'stopped' && this.child === null) this.launch();
      },
      (error: unknown) => {
        log.error({ err: error }, 'cannot keep a new tunnel root in the state dir');
        if (this.state === 'stopped') return;
        this.failed(this.failure(`cannot keep a new tunnel root in the state dir: ${error instanceof Error ? error.message : String(error)}`));
      },
    );
  }

  private onLine(child: ChildProcess, layout: TunnelLayout, line: string, log: Logger): void {
    if (child !== this.child) return;
    const [marker, ...rest] = line.trim().split(' ');
    if (marker === SELINUX_MARKER) {
      this.selinux = parseSelinux(rest[0] ?? '');
    } else if (marker === ROOT_TAKEN_MARKER) {
      this.foundTaken.add(child);
    } else if (marker === UNLOCKED_MARKER) {
      log.warn('cannot lock the tunnel directory in the VM (is flock installed there?); systemd-tmpfiles may age its socket out of /tmp while the tunnel runs');
    } else if (marker === SEEN_MARKER) {
      this.queries?.answer(rest[0] ?? '', rest[1] ?? '');
    } else if (marker === READY_MARKER) {
      const stdin = child.stdin;
      this.queries = stdin === null ? null : new VmQueries((text) => stdin.write(text));
      this.published.add(child);
      // Its script removed them first thing; a generation that never reached the VM did not.
      const removed = this.cleaning.get(child) ?? [];
      this.leftovers = this.leftovers.filter((bindPath) => !removed.includes(bindPath));
      this.state = 'ready';
      this.attempt = 0;
      this.rootChoices = 0;
      this.lastError = null;
      log.info({ generation: layout.generationName, selinux: this.selinux }, 'tunnel ready');
      if (child.pid !== undefined) {
        this.options.onChild({ id: this.id, pid: child.pid, vmDir: layout.dir, connection: this.connection.name, agentSocket: this.options.agentSocket, argv: child.spawnargs });
      }
      this.settle(null);
    }
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
    return new SandboxdError('TUNNEL_FAILED', `tunnel ${this.id}: ${message}`);
  }
}

/**
 * Closes stdin (the remote script cleans up; `farewell` first tells it why), then escalates to
 * signals within bounded time.
 */
export async function stopChild(child: ChildProcess, farewell?: string, graceMs = GRACEFUL_EXIT_MS): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('close', () => {
    resolve();
  }));
  const within = (ms: number): Promise<boolean> =>
    Promise.race([exited.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => {
      resolve(false);
    }, ms).unref())]);
  child.stdin?.end(farewell === undefined ? undefined : `${farewell}\n`);
  if (await within(graceMs)) return;
  child.kill('SIGTERM');
  if (await within(1_000)) return;
  child.kill('SIGKILL');
  await within(1_000);
}
