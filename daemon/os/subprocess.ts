import { execFile, type ChildProcess, type ExecFileException } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from './text.js';
import { Limiter } from './subprocess-limiter.js';

export interface SubprocessOptions {
  /** The whole environment: the daemon's own is never inherited (DESIGN §4). */
  env: Record<string, string>;
  /** Set when the command runs in the client's cwd, so a cwd that cannot be entered is the client's error. */
  clientCwd?: string;
  timeoutMs: number;
  /** Output kept of each stream (default 4 MiB); past it the command is killed and answered for with a null exit code. */
  maxOutputBytes?: number;
}

/** `exitCode` is null when the command was killed or could not start; one final newline is stripped. */
export interface SubprocessResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export type RunSubprocess = (file: string, args: readonly string[], options: SubprocessOptions) => Promise<SubprocessResult>;

/** How many podman/git processes the daemon runs at once; the rest queue. */
export const SUBPROCESS_LIMIT = 8;
const MAX_OUTPUT_BYTES = 4 * 1024 * 1024;
const OUT_OF_RESOURCES = new Set(['EMFILE', 'ENFILE', 'EAGAIN', 'ENOMEM']);
/** Node throws these synchronously for values it cannot pass to exec (a NUL byte in the env). */
const INVALID_ARGUMENT = new Set(['ERR_INVALID_ARG_VALUE', 'ERR_INVALID_ARG_TYPE']);
const CWD_FAILURES = new Set(['ENOENT', 'ENOTDIR', 'EACCES']);
/**
 * A command still running this long after its timeout's SIGTERM (podman waiting on a lock defers
 * the signal) is killed, and answered for without waiting for its pipes to close: the timeout is
 * a bound callers build on.
 */
const KILL_GRACE_MS = 2_000;

type ExecFile = typeof execFile;

/** As a shell's `$(…)` does: callers split lines without an empty last one. */
function stripFinalNewline(text: string): string {
  return text.endsWith('\n') ? text.slice(0, text.endsWith('\r\n') ? -2 : -1) : text;
}

async function isDirectory(dir: string): Promise<boolean> {
  return (await fs.stat(dir).catch(() => null))?.isDirectory() === true;
}

/** Failures that are the request's or the machine's, not a bug: each gets its own code. */
async function spawnFailure(error: ExecFileException, file: string, options: SubprocessOptions): Promise<SandboxdError | null> {
  const name = path.basename(file);
  const code = typeof error.code === 'string' ? error.code : '';
  if (OUT_OF_RESOURCES.has(code)) {
    return new SandboxdError('DAEMON_BUSY', `cannot start ${name}: the daemon is out of resources (${code})`);
  }
  if (INVALID_ARGUMENT.has(code)) return new SandboxdError('BAD_REQUEST', `cannot run ${name}: ${clip(error.message)}`);
  if (CWD_FAILURES.has(code) && options.clientCwd !== undefined && !(await isDirectory(options.clientCwd))) {
    return new SandboxdError('BAD_REQUEST', `the client's cwd ${clip(options.clientCwd)} is not a directory`);
  }
  return null;
}

/** One finished subprocess, as the daemon's debug log lists it with its duration. */
export interface SubprocessEvent {
  file: string;
  args: readonly string[];
  exitCode: number | null;
  ms: number;
}

export interface RunnerOptions {
  /** Shared by everything one runner runs: the fd and process budget is per process. */
  limiter?: Limiter;
  /** Hears of every subprocess once it ended. */
  observe?: (event: SubprocessEvent) => void;
  exec?: ExecFile;
}

/**
 * Runs a command without a shell and without inheriting the daemon's environment, at most
 * `limiter.limit` at a time. Never rejects for a non-zero exit; rejects with a SandboxdError when
 * the command cannot start for a reason the caller should hear about (no fds left, bad input).
 */
export function createSubprocessRunner(runner: RunnerOptions = {}): RunSubprocess {
  const { limiter = new Limiter(SUBPROCESS_LIMIT), observe, exec = execFile } = runner;
  return (file, args, options) =>
    limiter.run(
      () =>
        new Promise<SubprocessResult>((resolve, reject) => {
          const started = performance.now();
          let child: ChildProcess | undefined;
          let done = false;
          const backstop = setTimeout(() => {
            child?.kill('SIGKILL');
            settle(Object.assign(new Error(`${path.basename(file)} was still running ${String(KILL_GRACE_MS)} ms after its ${String(options.timeoutMs)} ms timeout, and was killed`), { killed: true }), '', '');
          }, options.timeoutMs + KILL_GRACE_MS);
          backstop.unref();
          const settle = (error: ExecFileException | null, rawStdout: string, rawStderr: string): void => {
            if (done) return;
            done = true;
            clearTimeout(backstop);
            observe?.({ file, args, exitCode: error === null ? 0 : typeof error.code === 'number' ? error.code : null, ms: Math.round(performance.now() - started) });
            const [stdout, stderr] = [stripFinalNewline(rawStdout), stripFinalNewline(rawStderr)];
            if (error === null) {
              resolve({ exitCode: 0, stdout, stderr });
              return;
            }
            // A number is the exit status; a string is why the process never ran (or its output overflowed).
            if (typeof error.code === 'number') {
              resolve({ exitCode: error.code, stdout, stderr });
              return;
            }
            void spawnFailure(error, file, options).then((failure) => {
              if (failure === null) resolve({ exitCode: null, stdout, stderr: stderr === '' ? error.message : stderr });
              else reject(failure);
            });
          };
          try {
            child = exec(
              file,
              args,
              {
                env: options.env,
                cwd: options.clientCwd,
                timeout: options.timeoutMs,
                maxBuffer: options.maxOutputBytes ?? MAX_OUTPUT_BYTES,
                encoding: 'utf8',
                windowsHide: true,
              },
              settle,
            );
          } catch (error) {
            // Invalid options and a cwd that is not a directory are thrown, not reported.
            settle(error as ExecFileException, '', '');
          }
        }),
    );
}

/** For a command run once outside the daemon (the CLI's checks); the daemon builds its own runner. */
export const runSubprocess: RunSubprocess = createSubprocessRunner();
