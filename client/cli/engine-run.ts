import { spawn } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { SandboxdError } from '../../shared/errors.js';
import { terminalSentToGroup } from './terminal.js';

/** What `docker run` and `podman run` themselves act on, passed to them as they would get them. */
export const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];
/** After its container is removed, the engine client has this long to see it and exit. */
const ENGINE_EXIT_GRACE_MS = 10_000;

/** How a process ended: its exit code, or the signal that ended it. */
export type Exit = { code: number; signal: null } | { code: null; signal: NodeJS.Signals };

type Listener = (signal: NodeJS.Signals, count: number) => void;

/**
 * The signals `run` receives, from its first moment: none of them may end it before its session
 * is released, so each is kept and handed to whoever listens (the acquire, then the engine).
 */
export class SignalInbox {
  readonly received: NodeJS.Signals[] = [];
  private listener: Listener | null = null;
  private readonly handler = (signal: NodeJS.Signals): void => {
    this.received.push(signal);
    this.listener?.(signal, this.received.length);
  };

  constructor() {
    for (const signal of FORWARDED_SIGNALS) process.on(signal, this.handler);
  }

  listen(listener: Listener): void {
    this.listener = listener;
  }

  close(): void {
    this.listener = null;
    for (const signal of FORWARDED_SIGNALS) process.off(signal, this.handler);
  }
}

export interface EngineRun {
  /** How the engine client ended. */
  exit: Exit;
  /** A signal reached `run` while the engine ran: the container may outlive its client. */
  interrupted: boolean;
  /** The signal that made `run` stop the container itself (a second one). */
  forcedBy: NodeJS.Signals | null;
}

export interface EngineRunOptions {
  engine: string;
  args: string[];
  env: Record<string, string>;
  inbox: SignalInbox;
  /** Stops and removes the session's container; called when `run` must end before the engine does. */
  stopContainer(): Promise<void>;
}

function engineNotFound(engine: string): SandboxdError {
  return new SandboxdError('ENGINE_NOT_FOUND', `${engine} was not found on PATH (${process.env.PATH ?? ''})`, {
    remedy: `Install ${engine} or add its directory to PATH.`,
  });
}

/**
 * Runs `<engine> run …` attached to this terminal, as a transparent wrapper (STYLE 15): each signal
 * goes to the engine client as it would reach an engine run directly, once (one the terminal sent
 * to the whole job reached it already); `run` waits for it. A second signal means the caller wants
 * out now: the container is stopped and removed first, then the engine client gets the grace it
 * needs to see that before it is killed.
 */
export function runEngine(options: EngineRunOptions): Promise<EngineRun> {
  const { engine, inbox } = options;
  return new Promise((resolve, reject) => {
    // Values of `-e NAME` travel here, in the engine's environment, never on its command line.
    const child = spawn(engine, options.args, { stdio: 'inherit', env: { ...process.env, ...options.env } });
    let interrupted = false;
    let forcedBy: NodeJS.Signals | null = null;
    let killTimer: NodeJS.Timeout | null = null;
    const running = (): boolean => child.exitCode === null && child.signalCode === null;
    inbox.listen((signal, count) => {
      interrupted = true;
      if (count === 1) {
        void terminalSentToGroup(signal).then((sent) => {
          if (!sent && running()) child.kill(signal);
        });
        return;
      }
      if (forcedBy !== null) return;
      forcedBy = signal;
      void options
        .stopContainer()
        .catch(() => undefined)
        .then(() => {
          if (!running()) return;
          killTimer = setTimeout(() => child.kill('SIGKILL'), ENGINE_EXIT_GRACE_MS);
        });
    });
    child.once('error', (error: NodeJS.ErrnoException) => {
      reject(error.code === 'ENOENT' ? engineNotFound(engine) : error);
    });
    child.once('exit', (code, signal) => {
      if (killTimer !== null) clearTimeout(killTimer);
      const exit: Exit = signal === null ? { code: code ?? 1, signal: null } : { code: null, signal };
      resolve({ exit, interrupted, forcedBy });
    });
  });
}

/** What a shell sees of a process killed by `signal`, for exit paths that cannot be killed by it. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + osConstants.signals[signal];
}
