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
  slotPaths,
  SLOTS_MARKER,
  UNLOCKED_MARKER,
  type SelinuxMode,
  type TunnelLayout,
} from '../../podman/ssh-command.js';
import type { MuxClient } from '../../podman/ssh-mux.js';
import { VmQueries, type PathKind } from '../../podman/vm-queries.js';

/** After stdin closes, the remote script cleans up and ssh exits; past this we signal it. */
const GRACEFUL_EXIT_MS = 2_000;
const STDERR_KEEP_BYTES = 4_096;
/** The control socket exists once the login is through; a few tries cover a slow master. */
const MUX_CONNECT_TRIES = 5;

export function tunnelFailure(tunnelId: string, message: string): SandboxdError {
  return new SandboxdError('TUNNEL_FAILED', `tunnel ${tunnelId}: ${message}`);
}

/** What a generation tells its tunnel; the tunnel ignores all but its current generation. */
export interface GenerationEvents {
  selinux(generation: Generation, mode: SelinuxMode): void;
  /** Its script verified and locked the tunnel dir: sessions' sockets can be published. */
  ready(generation: Generation): void;
  closed(generation: Generation, code: number | null): void;
}

export interface GenerationOptions {
  tunnelId: string;
  number: number;
  child: ChildProcess;
  layout: TunnelLayout;
  /** Where this generation's ssh listens as a ControlMaster (a daemon-private directory). */
  controlPath: string;
  /** Session directories to make as soon as the script is ready (`prepare`). */
  prepare?: readonly string[];
  /** Connects to a control socket (ssh-mux.ts; a test stands in for it). */
  connectMux(controlPath: string): Promise<MuxClient>;
  logger: Logger;
  events: GenerationEvents;
}

/** A session's socket: its directory's name in the tunnel dir, and the host socket its forward reaches. */
export interface SlotTarget {
  name: string;
  hostSocket: string;
}

/**
 * One ssh ControlMaster child of a tunnel and what is known of it alone: what its script said, the
 * questions and slot commands sent over its stdin, its control connection, and the tail of its
 * stderr. Its script goes on stdin as it is made, with every VM path in it, and each session's
 * forward goes over the control socket: never on an argv, host or VM.
 */
export class Generation {
  readonly number: number;
  readonly child: ChildProcess;
  readonly layout: TunnelLayout;
  readonly log: Logger;
  /** Its script printed the ready line. */
  isReady = false;
  /** Its script found the root held by someone else: its close chooses another root. */
  foundTaken = false;
  /** Questions and slot commands over this ssh's stdin, answered once its script is ready. */
  private readonly lines: VmQueries | null;
  /** Session directories `prepare` asked for, by name: whether the VM made them. */
  private readonly made = new Map<string, Promise<boolean>>();
  private mux: Promise<MuxClient> | null = null;
  private stderr = '';

  constructor(private readonly options: GenerationOptions) {
    const { child } = options;
    this.number = options.number;
    this.child = child;
    this.layout = options.layout;
    this.log = options.logger.child({ generation: options.number, pid: child.pid });
    this.watch();
    const stdin = child.stdin;
    stdin?.write(`${remoteScript(options.layout)}\n`);
    this.lines = stdin === null ? null : new VmQueries((text) => stdin.write(text));
    // Queued behind the script: the VM makes them as soon as it is ready, before the first publish.
    for (const name of options.prepare ?? []) this.prepare(name);
  }

  /** Questions and slot commands, once its script is ready; null before. */
  private get queries(): VmQueries | null {
    return this.isReady ? this.lines : null;
  }

  /** The last of what ssh printed on stderr (or why it could not be run). */
  get stderrTail(): string {
    return this.stderr;
  }

  ask(paths: readonly string[]): Promise<Map<string, PathKind>> {
    return this.queries === null ? Promise.reject(this.failure('the tunnel is not ready')) : this.queries.ask(paths);
  }

  /**
   * Makes a session's directory ahead of its publish (`m`), so that publish costs the VM one round
   * trip fewer; `publish` of that name on this generation waits for this answer instead.
   */
  prepare(name: string): void {
    if (this.lines === null || this.made.has(name)) return;
    const made = this.lines.slot('m', name);
    made.catch(() => undefined);
    this.made.set(name, made);
  }

  /**
   * Publishes a session's socket in its directory: made (a socket an earlier bind left removed;
   * `prepare` may have done it), bound by sshd as a remote forward to the session's host socket,
   * then made usable by any container user. `again`: the forward exists on this connection already
   * and is asked for anew. `next` names a directory to `prepare` in the same round trip as the last
   * command; it is asked for a name only then, so no name is handed out before its `m` is sent.
   */
  async publish(slot: SlotTarget, options: { again?: boolean; next?: () => string | null } = {}): Promise<void> {
    const queries = this.requireQueries();
    const { socket } = slotPaths(this.layout, slot.name);
    const prepared = this.made.get(slot.name);
    this.made.delete(slot.name);
    // Anew, the old forward goes first: `m` then removes the socket it bound. One prepared before a
    // slow login may have timed out while the line waited behind the script: asked again, it finds
    // the directory.
    const made = options.again === true ? null : (prepared?.catch(() => queries.slot('m', slot.name)) ?? queries.slot('m', slot.name));
    const mux = await this.control();
    if (options.again === true) await mux.closeRemoteForward(socket, slot.hostSocket).catch(() => undefined);
    if (!(await (made ?? queries.slot('m', slot.name)))) throw this.failure(`cannot make the session directory ${slot.name} in the VM`);
    await mux.openRemoteForward(socket, slot.hostSocket);
    const usable = queries.slot('p', slot.name);
    const next = options.next?.() ?? null;
    if (next !== null) this.prepare(next);
    if (!(await usable)) throw this.failure(`sshd did not bind the socket of session directory ${slot.name}`);
  }

  /** Cancels a session's forward and removes its directory in the VM. */
  async unpublish(slot: SlotTarget): Promise<void> {
    const queries = this.requireQueries();
    const mux = await this.control();
    await mux.closeRemoteForward(slotPaths(this.layout, slot.name).socket, slot.hostSocket);
    await queries.slot('r', slot.name);
  }

  /** Removes a session's directory whose forward is gone already (its session ended while no ssh ran). */
  async remove(name: string): Promise<void> {
    await this.requireQueries().slot('r', name);
  }

  /** The session directories whose socket is not the one sshd bound there. */
  replaced(): Promise<string[]> {
    return this.queries === null ? Promise.resolve([]) : this.queries.replaced();
  }

  /**
   * Fails the open questions with `why`, then closes stdin (the remote script cleans up; `farewell`
   * first tells it why) and escalates to signals within bounded time.
   */
  async stop(why: SandboxdError, farewell?: string): Promise<void> {
    this.lines?.close(why);
    void this.mux?.then((client) => {
      client.close();
    }, () => undefined);
    await stopChild(this.child, farewell);
  }

  private requireQueries(): VmQueries {
    if (this.queries === null) throw this.failure('the tunnel is not ready');
    return this.queries;
  }

  /** One control connection per generation, made on first use; one that fails or closes is made again. */
  private control(): Promise<MuxClient> {
    const current = this.mux;
    if (current !== null) {
      return current.then((client) => (client.closed ? this.reconnect() : client), () => this.reconnect());
    }
    return this.reconnect();
  }

  private reconnect(): Promise<MuxClient> {
    const connecting = (async () => {
      for (let attempt = 1; ; attempt += 1) {
        try {
          return await this.options.connectMux(this.options.controlPath);
        } catch (error) {
          if (attempt >= MUX_CONNECT_TRIES || this.child.exitCode !== null) throw this.failure(`cannot reach the ssh control socket: ${(error as Error).message}`);
          await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
        }
      }
    })();
    this.mux = connecting;
    return connecting;
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
      this.lines?.close(this.failure('the ssh connection closed'));
      void this.mux?.then((client) => {
        client.close();
      }, () => undefined);
      this.options.events.closed(this, code);
    });
  }

  /**
   * The script says the root is taken, or that it is ready, once and before anything else but the
   * SELinux line; a VM that says either again, or out of turn, is not believed.
   */
  private onLine(line: string): void {
    const [marker, ...rest] = line.trim().split(' ');
    if (marker === SELINUX_MARKER) {
      this.options.events.selinux(this, parseSelinux(rest[0] ?? ''));
    } else if (marker === ROOT_TAKEN_MARKER && !this.isReady) {
      this.foundTaken = true;
    } else if (marker === UNLOCKED_MARKER) {
      this.log.warn('cannot lock the tunnel directory in the VM (is flock installed there?); systemd-tmpfiles may age its sockets out of /tmp while the tunnel runs');
    } else if (marker === SEEN_MARKER) {
      this.lines?.answer(rest[0] ?? '', rest[1] ?? '');
    } else if (marker === SLOTS_MARKER) {
      this.lines?.answer(rest[0] ?? '', rest.slice(1).join(' '));
    } else if (marker === READY_MARKER && !this.isReady && !this.foundTaken) {
      this.isReady = true;
      // The control connection is ready before the first publish asks for it.
      void this.control().catch(() => undefined);
      this.options.events.ready(this);
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
