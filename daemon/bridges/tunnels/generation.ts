import type { ChildProcess } from 'node:child_process';
import { SandboxdError } from '../../../shared/errors.js';
import type { Logger } from '../../os/logger.js';
import {
  parseSelinux,
  READY_MARKER,
  remoteScript,
  ROOT_TAKEN_MARKER,
  SEEN_MARKER,
  SELINUX_MARKER,
  UNLOCKED_MARKER,
  type SelinuxMode,
  type TunnelLayout,
} from '../../podman/ssh-command.js';
import { VmQueries, type PathKind } from '../../podman/vm-queries.js';

/** After stdin closes, the remote script cleans up and ssh exits; past this we signal it. */
const GRACEFUL_EXIT_MS = 2_000;
const STDERR_KEEP_BYTES = 4_096;

export function tunnelFailure(tunnelId: string, message: string): SandboxdError {
  return new SandboxdError('TUNNEL_FAILED', `tunnel ${tunnelId}: ${message}`);
}

/** What a generation tells its tunnel; the tunnel ignores all but its current generation. */
export interface GenerationEvents {
  selinux(generation: Generation, mode: SelinuxMode): void;
  /** Its script published the socket as `agent.sock`. */
  published(generation: Generation): void;
  closed(generation: Generation, code: number | null): void;
}

export interface GenerationOptions {
  tunnelId: string;
  number: number;
  child: ChildProcess;
  layout: TunnelLayout;
  /** Bind paths of earlier generations that closed unpublished: this one's script removes them. */
  cleaning: readonly string[];
  logger: Logger;
  events: GenerationEvents;
}

/**
 * One `ssh -R` child of a tunnel and what is known of it alone: its socket names in the VM, what
 * its script said, the questions asked over its stdin, and the tail of its stderr. Its script goes
 * on stdin as it is made, with every VM path in it: never on an argv in the VM.
 */
export class Generation {
  readonly number: number;
  readonly child: ChildProcess;
  readonly layout: TunnelLayout;
  readonly cleaning: readonly string[];
  readonly log: Logger;
  /** Its script moved the bound socket in and repointed `agent.sock` (it printed the ready line). */
  published = false;
  /** Its script found the root held by someone else: its close chooses another root. */
  foundTaken = false;
  /** Visibility questions over this ssh's stdin; null until it is published. */
  private queries: VmQueries | null = null;
  private stderr = '';

  constructor(private readonly options: GenerationOptions) {
    const { child } = options;
    this.number = options.number;
    this.child = child;
    this.layout = options.layout;
    this.cleaning = options.cleaning;
    this.log = options.logger.child({ generation: options.number, pid: child.pid });
    this.watch();
    child.stdin?.write(`${remoteScript(options.layout, options.cleaning)}\n`);
  }

  /** The last of what ssh printed on stderr (or why it could not be run). */
  get stderrTail(): string {
    return this.stderr;
  }

  ask(paths: readonly string[]): Promise<Map<string, PathKind>> {
    return this.queries === null ? Promise.reject(this.failure('the tunnel is not ready')) : this.queries.ask(paths);
  }

  /** Whether `agent.sock` in the VM still leads to the socket this generation published. */
  intact(): Promise<boolean> {
    return this.queries === null ? Promise.resolve(false) : this.queries.intact();
  }

  /**
   * Fails the open questions with `why`, then closes stdin (the remote script cleans up; `farewell`
   * first tells it why) and escalates to signals within bounded time.
   */
  async stop(why: SandboxdError, farewell?: string): Promise<void> {
    this.queries?.close(why);
    await stopChild(this.child, farewell);
  }

  private watch(): void {
    const { child } = this.options;
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-STDERR_KEEP_BYTES);
    });
    let pending = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) this.onLine(line);
    });
    // ssh must never see EOF on stdin until we want the remote side to clean up.
    child.stdin?.on('error', () => undefined);
    child.once('error', (error: NodeJS.ErrnoException) => {
      this.stderr += error.code === 'ENOENT' ? 'ssh: command not found (install OpenSSH)' : error.message;
    });
    child.once('close', (code: number | null) => {
      this.queries?.close(this.failure('the ssh connection closed'));
      this.options.events.closed(this, code);
    });
  }

  /**
   * The script says the root is taken, or that it published, once and before anything else but the
   * SELinux line; a VM that says either again, or out of turn, is not believed.
   */
  private onLine(line: string): void {
    const [marker, ...rest] = line.trim().split(' ');
    if (marker === SELINUX_MARKER) {
      this.options.events.selinux(this, parseSelinux(rest[0] ?? ''));
    } else if (marker === ROOT_TAKEN_MARKER && !this.published) {
      this.foundTaken = true;
    } else if (marker === UNLOCKED_MARKER) {
      this.log.warn('cannot lock the tunnel directory in the VM (is flock installed there?); systemd-tmpfiles may age its socket out of /tmp while the tunnel runs');
    } else if (marker === SEEN_MARKER) {
      this.queries?.answer(rest[0] ?? '', rest[1] ?? '');
    } else if (marker === READY_MARKER && !this.published && !this.foundTaken) {
      const stdin = this.child.stdin;
      this.queries = stdin === null ? null : new VmQueries((text) => stdin.write(text));
      this.published = true;
      this.options.events.published(this);
    }
  }

  private failure(message: string): SandboxdError {
    return tunnelFailure(this.options.tunnelId, message);
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
