import { spawn } from 'node:child_process';
import { closeSync, openSync, promises as fs } from 'node:fs';
import { SandboxdError } from '../shared/errors.js';
import type { StatusResponse } from '../shared/contracts/status.js';
import { currentPlatform, type SandboxdPaths } from '../shared/paths.js';
import { createProcessProbe, readPidRecord, type ProcessProbe } from '../daemon/os/process-identity.js';
import { ensureSecureDir } from '../daemon/os/secure-dir.js';
import { DAEMON_CWD, daemonEnvironment, resolveDaemonCommand, thisModuleDir, type DaemonCommand } from './daemon-launch.js';
import { POLL_INTERVAL_MS, START_TIMEOUT_MS, statusIfRunning, statusOrColdStart, waitForService } from './daemon-status.js';
import { replaceOlderDaemon } from './replace-daemon.js';
import { startThroughService } from './service/control.js';
import { acquireSpawnLock } from './spawn-lock.js';

/**
 * A daemon this client spawned answers within a fraction of a second; polling finely until then
 * keeps the wait after it listens short (the bench's auto-start row).
 */
const FAST_POLL_MS = 10;
const FAST_POLL_FOR_MS = 2_000;
const STDERR_TAIL_BYTES = 2_000;

async function tail(file: string): Promise<string> {
  try {
    const text = await fs.readFile(file, 'utf8');
    return text.slice(-STDERR_TAIL_BYTES).trim();
  } catch {
    return '';
  }
}

export interface EnsureDaemonOptions {
  paths: SandboxdPaths;
  /** The client's environment: it decides the paths and where the daemon is found, not the daemon's environment. */
  env: NodeJS.ProcessEnv;
  /** false: only connect. */
  autoStart: boolean;
  /** The command that runs the daemon (`daemon` is appended); else SANDBOXD_BIN, PATH, this package. */
  daemonCommand?: readonly string[] | undefined;
  /**
   * Told why the installed service was passed over (its program is gone, its manager refused),
   * when the client starts the daemon itself instead. Default: a `sandboxd: …` line on stderr.
   */
  onNotice?: ((message: string) => void) | undefined;
}

function noticeOnStderr(message: string): void {
  process.stderr.write(`sandboxd: ${message}\n`);
}

/** The running daemon of this protocol; an older one is replaced when auto-start is on. */
async function runningDaemon(options: EnsureDaemonOptions): Promise<StatusResponse | null> {
  try {
    return await statusOrColdStart(options.paths, options.env);
  } catch (error) {
    const older = error instanceof SandboxdError && error.code === 'PROTOCOL_MISMATCH' && options.autoStart;
    // An older daemon makes way (shared/protocol-policy.ts, step 4); a newer one is left alone.
    if (older && (await replaceOlderDaemon(options.paths.socketPath))) return null;
    throw error;
  }
}

/**
 * Connects, or starts the daemon and connects (STYLE 6). Concurrent callers serialise on a spawn
 * lock (beside the state, as the instance lock is) and re-check under it, so any number of them,
 * from any shell of the user, leave exactly one daemon.
 */
export async function ensureDaemon(options: EnsureDaemonOptions): Promise<StatusResponse> {
  const { paths } = options;
  const running = await runningDaemon(options);
  if (running !== null) return running;
  if (!options.autoStart) {
    throw new SandboxdError('DAEMON_NOT_RUNNING', `sandboxd is not running (no daemon on ${paths.socketPath}) and auto-start is off`);
  }
  await ensureSecureDir(paths.stateDir);
  await ensureSecureDir(paths.runtimeDir);
  const release = await acquireSpawnLock(paths.spawnLockPath, START_TIMEOUT_MS);
  try {
    return (await statusIfRunning(paths.socketPath)) ?? (await spawnAndWait(options));
  } finally {
    await release().catch(() => undefined);
  }
}

interface Launched {
  exitCode: number | null;
  spawnError: string | null;
}

/** Detached, in a neutral directory, with a minimal environment (client/daemon-launch.ts). */
function launch(command: DaemonCommand, env: Record<string, string>, stderrPath: string): Launched {
  const stderrFd = openSync(stderrPath, 'w', 0o600);
  const launched: Launched = { exitCode: null, spawnError: null };
  try {
    const child = spawn(command.file, [...command.args], { detached: true, cwd: DAEMON_CWD, stdio: ['ignore', 'ignore', stderrFd], env });
    child.on('exit', (code) => {
      launched.exitCode = code ?? 1;
    });
    child.on('error', (error) => {
      launched.spawnError = error.message;
      launched.exitCode = 1;
    });
    child.unref();
  } finally {
    closeSync(stderrFd);
  }
  return launched;
}

/** Whether the daemon named in the pid record still runs (a zombie does not). */
async function holderAlive(paths: SandboxdPaths, probe: ProcessProbe): Promise<boolean> {
  const holder = await readPidRecord(paths.pidPath);
  return holder !== null && (await probe.isSame(holder.pid, holder.startTime));
}

async function spawnAndWait({ paths, env, daemonCommand, onNotice }: EnsureDaemonOptions): Promise<StatusResponse> {
  const platform = currentPlatform();
  const service = await startThroughService(env, platform);
  if (service.manager !== null) return waitForService(paths, service.manager.kind);
  if (service.reason !== null) (onNotice ?? noticeOnStderr)(service.reason);
  const command = await resolveDaemonCommand({ option: daemonCommand, env, moduleDir: thisModuleDir(), execPath: process.execPath, bun: process.versions.bun !== undefined });
  const daemonEnv = daemonEnvironment(env, command, process.execPath, platform);
  const probe = createProcessProbe(platform);
  const stderrPath = `${paths.runtimeDir}/daemon.stderr`;
  let daemon = launch(command, daemonEnv, stderrPath);

  const started = Date.now();
  const deadline = started + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const status = await statusIfRunning(paths.socketPath);
    if (status !== null) return status;
    if (daemon.exitCode !== null) {
      const output = daemon.spawnError ?? (await tail(stderrPath));
      if (!output.includes('already running')) {
        throw new SandboxdError('DAEMON_START_FAILED', `the daemon (${command.file}) exited with code ${daemon.exitCode} while starting${output === '' ? '' : `:\n${output}`}`);
      }
      // Another daemon holds the lock: it will answer shortly while it lives; once it is gone
      // (killed between its check and ours), start again at once instead of waiting it out.
      if (!(await holderAlive(paths, probe))) daemon = launch(command, daemonEnv, stderrPath);
    }
    await new Promise((resolve) => setTimeout(resolve, Date.now() - started < FAST_POLL_FOR_MS ? FAST_POLL_MS : POLL_INTERVAL_MS));
  }
  throw new SandboxdError('DAEMON_START_FAILED', `the daemon did not answer on ${paths.socketPath} within ${START_TIMEOUT_MS} ms`, {
    remedy: `Run \`sandboxd daemon\` in a terminal to see why; its stderr is in ${stderrPath}.`,
  });
}
