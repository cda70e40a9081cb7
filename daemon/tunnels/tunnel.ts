import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { SandboxdError } from '../../shared/errors.js';
import type { BridgeInfo, BridgeState } from '../../shared/contracts/bridges.js';
import type { Bridge } from '../bridges/bridge.js';
import type { Logger } from '../logger.js';
import type { PodmanConnection } from '../podman/connections.js';
import { backoffMs, classifySshFailure, HALT_WORD, READY_MARKER, sshArgs, tunnelLayout, type TunnelLayout } from './ssh-command.js';

/** The issue bounds a failing acquire at 20 s; ssh's ConnectTimeout sits well inside it. */
export const READY_TIMEOUT_MS = 15_000;
const CONNECT_TIMEOUT_SECONDS = 8;
const ALIVE_INTERVAL_SECONDS = 5;
const ALIVE_COUNT_MAX = 3;
/** After stdin closes, the remote script cleans up and ssh exits; past this we signal it. */
const GRACEFUL_EXIT_MS = 2_000;
const STDERR_KEEP_BYTES = 4_096;

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
  hash: string;
  connection: PodmanConnection;
  agentSocket: string;
  vmRoot: string;
  knownHostsPath: string;
  logger: Logger;
  spawnSsh: SpawnSsh;
  /** Persists the running ssh so a restarted daemon can reap it (null: nothing running). */
  onChild(record: TunnelRecord | null): void;
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
export class Tunnel implements Bridge {
  readonly id: string;
  private state: BridgeState = 'starting';
  private child: ChildProcess | null = null;
  private generation = 0;
  private attempt = 0;
  private restarts = 0;
  private lastError: SandboxdError | null = null;
  private selinux: string | null = null;
  private backoffTimer: NodeJS.Timeout | null = null;
  private waiters: Waiter[] = [];
  private readonly createdAt = new Date().toISOString();
  private readonly logger: Logger;
  private readonly dir: string;

  constructor(private readonly options: TunnelOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'tunnel', tunnelId: options.id });
    this.dir = tunnelLayout(options.vmRoot, options.hash, 0, '').dir;
  }

  /** The VM directory containers mount. */
  get vmDir(): string {
    return this.dir;
  }

  /** `getenforce` in the VM as of the last generation ('none' where it does not exist). */
  get selinuxMode(): string | null {
    return this.selinux;
  }

  start(): void {
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
      this.launch();
    }
    const timeoutMs = this.options.readyTimeoutMs ?? READY_TIMEOUT_MS;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new SandboxdError('TUNNEL_UNREACHABLE', `the tunnel over connection ${this.options.connection.name} was not ready within ${timeoutMs} ms${this.lastError === null ? '' : ` (last error: ${this.lastError.message})`}`));
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
    if (this.backoffTimer !== null) clearTimeout(this.backoffTimer);
    this.backoffTimer = null;
    this.settle(this.failure('the tunnel was stopped'));
    const child = this.child;
    this.child = null;
    if (child !== null) await stopChild(child, HALT_WORD);
    this.options.onChild(null);
    this.logger.info('tunnel halted');
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'tunnel',
      connection: this.options.connection.name,
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

  private launch(): void {
    this.generation += 1;
    const layout = tunnelLayout(this.options.vmRoot, this.options.hash, this.generation, randomBytes(4).toString('hex'));
    const args = sshArgs({
      connection: this.options.connection,
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
  }

  private watch(child: ChildProcess, layout: TunnelLayout): void {
    let stderr = '';
    let stdout = '';
    const log = this.logger.child({ generation: this.generation, pid: child.pid });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-STDERR_KEEP_BYTES);
    });
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split('\n').find((candidate) => candidate.startsWith(READY_MARKER));
      if (line === undefined || child !== this.child) return;
      stdout = '';
      this.selinux = line.slice(READY_MARKER.length).trim() || null;
      this.state = 'ready';
      this.attempt = 0;
      this.lastError = null;
      log.info({ socket: `${layout.dir}/${layout.generationName}`, selinux: this.selinux }, 'tunnel ready');
      if (child.pid !== undefined) {
        this.options.onChild({ id: this.id, pid: child.pid, vmDir: layout.dir, connection: this.options.connection.name, agentSocket: this.options.agentSocket, argv: child.spawnargs });
      }
      this.settle(null);
    });
    // ssh must never see EOF on stdin until we want the remote side to clean up.
    child.stdin?.on('error', () => undefined);
    child.once('error', (error: NodeJS.ErrnoException) => {
      stderr += error.code === 'ENOENT' ? 'ssh: command not found (install OpenSSH)' : error.message;
    });
    child.once('close', (code) => {
      if (child !== this.child || this.state === 'stopped') return;
      this.child = null;
      const error = classifySshFailure(this.options.connection.name, stderr, code);
      this.lastError = error;
      log.warn({ code, stderr: stderr.trim().slice(-500) }, 'ssh exited');
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
        this.launch();
      }, delay);
      this.backoffTimer.unref();
    });
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
export async function stopChild(child: ChildProcess, farewell?: string): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('close', () => {
    resolve();
  }));
  const within = (ms: number): Promise<boolean> =>
    Promise.race([exited.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => {
      resolve(false);
    }, ms).unref())]);
  child.stdin?.end(farewell === undefined ? undefined : `${farewell}\n`);
  if (await within(GRACEFUL_EXIT_MS)) return;
  child.kill('SIGTERM');
  if (await within(1_000)) return;
  child.kill('SIGKILL');
  await within(1_000);
}
