import { promises as fs, rmSync } from 'node:fs';
import os from 'node:os';
import type { Server } from 'node:net';
import { SandboxdError } from '../shared/errors.js';
import { systemClock } from './os/clock.js';
import { assertSocketPathFits, currentPlatform, otherLayoutSockets, resolvePaths, type SandboxdPaths } from '../shared/paths.js';
import { createDaemon, DEFAULT_SETTINGS, type DaemonSettings } from './composition/daemon.js';
import { acquireInstanceLock } from './lifecycle/instance-lock.js';
import { clip } from './os/text.js';
import { observeSubprocesses } from './os/subprocess.js';
import { createLogger, rotateLog, type LogTarget } from './os/logger.js';
import { commandLine, createProcessProbe, readPidRecord } from './os/process-identity.js';
import { ensureOwnDir, ensureSecureDir, withUmask } from './os/secure-dir.js';
import { VERSION } from './os/package-files.js';
import { reapOrphans, TunnelStore } from './bridges/tunnels/tunnel-store.js';
import { inheritedListenFd, scrubActivationEnv } from './lifecycle/socket-activation.js';
import { socketAnswers } from './os/socket-probe.js';

/** SIGTERM/SIGINT/shutdown must finish within 5 s; past this we clean up by hand and exit. */
const SHUTDOWN_DEADLINE_MS = 4_500;
/** A listener accepts at once, even a stopped one (into its backlog); a dead one's socket refuses. */
const SOCKET_PROBE_MS = 1_000;

export interface RunDaemonOptions {
  env: NodeJS.ProcessEnv;
  log: 'file' | 'stdout';
  settings: Partial<DaemonSettings>;
  /** Called once the socket accepts connections (the CLI prints a line). */
  onListening?: (paths: SandboxdPaths) => void;
  /**
   * Started by launchd or systemd: another daemon already serving is not a failure (exit 0), or
   * launchd's KeepAlive would start this one again every 10 s for as long as that one runs.
   */
  serviceManager?: 'launchd' | 'systemd' | undefined;
  /** A daemon under a service manager found another one serving; `message` says which. */
  onAlreadyRunning?: (message: string) => void;
}

/**
 * Removes a socket left by a dead daemon; only called while holding the instance lock. That lock
 * is the state dir's, so a socket something still answers on is another daemon's (one of another
 * state dir given the same SANDBOXD_RUNTIME_DIR): it is never taken from under it (STYLE 5).
 */
async function clearStaleSocket(socketPath: string): Promise<void> {
  try {
    const stat = await fs.lstat(socketPath);
    if (!stat.isSocket()) {
      throw new SandboxdError('INSECURE_DIRECTORY', `${socketPath} exists and is not a socket`, {
        remedy: `Remove ${socketPath} by hand; sandboxd only deletes its own sockets.`,
      });
    }
    if (await socketAnswers(socketPath, SOCKET_PROBE_MS)) {
      throw new SandboxdError('DAEMON_ALREADY_RUNNING', `another daemon answers on ${socketPath}`, {
        remedy: 'Stop it (`sandboxd status` names its pid), or give each state dir its own SANDBOXD_RUNTIME_DIR.',
      });
    }
    await fs.rm(socketPath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

/** Whether a daemon of an earlier layout (a stray that may share this state dir) answers. */
async function strayAnswers(sockets: readonly string[]): Promise<boolean> {
  const answers = await Promise.all(sockets.map((socket) => socketAnswers(socket, SOCKET_PROBE_MS)));
  return answers.includes(true);
}

/** `target`: the socket path to create, or a listening fd a service manager handed over. */
function listenOn(server: Server, target: { path: string } | { fd: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.off('error', reject);
      resolve();
    };
    // umask 0177: the socket is 0600 from the moment it exists (DESIGN §3), never chmod-ed. With the
    // 0700 directory this is the peer check: connect() needs write permission on the socket, so
    // only this uid (and root) can reach it. Node exposes no SO_PEERCRED/getpeereid to ask again.
    // An inherited socket was made by systemd with the unit's SocketMode=0600.
    if ('fd' in target) server.listen({ fd: target.fd }, listening);
    else withUmask(0o177, () => server.listen(target.path, listening));
  });
}

/** The foreground daemon: wires the real edges, runs until a signal or /v1/shutdown. */
export async function runDaemon(options: RunDaemonOptions): Promise<number> {
  const platform = currentPlatform();
  const home = os.homedir();
  const activatedFd = inheritedListenFd(options.env, process.pid);
  scrubActivationEnv(options.env);
  scrubActivationEnv(process.env);
  const pathInputs = { platform, env: options.env, uid: process.getuid?.() ?? 0, home };
  const paths = resolvePaths(pathInputs);
  const strays = otherLayoutSockets(pathInputs, paths);
  assertSocketPathFits(paths.socketPath, platform);
  await ensureSecureDir(paths.runtimeDir);
  await ensureOwnDir(paths.emptyDir, 0o555);
  await ensureSecureDir(paths.stateDir);
  let logTarget: LogTarget = { kind: 'stdout' };
  if (options.log === 'file') {
    await ensureSecureDir(paths.logDir);
    await rotateLog(paths.logPath);
    logTarget = { kind: 'file', path: paths.logPath };
  }
  const logger = createLogger(logTarget);
  observeSubprocesses((event) => {
    logger.debug({ module: 'subprocess', file: event.file, args: event.args.slice(0, 16).map((arg) => clip(arg)), exitCode: event.exitCode, ms: event.ms }, 'subprocess');
  });
  const probe = createProcessProbe(platform);

  let stop: (reason: string) => void = () => undefined;
  const stopped = new Promise<number>((resolve) => {
    stop = (reason) => {
      resolve(0);
      logger.info({ reason }, 'stopping');
    };
  });
  const alreadyRunning = (error: unknown): boolean => {
    if (options.serviceManager === undefined || !(error instanceof SandboxdError && error.code === 'DAEMON_ALREADY_RUNNING')) return false;
    logger.info({ serviceManager: options.serviceManager, reason: error.message }, 'another daemon serves; leaving it to');
    options.onAlreadyRunning?.(error.message);
    return true;
  };
  const releaseLock = await acquireInstanceLock({
    lockTarget: paths.stateDir,
    lockPath: paths.lockPath,
    guardPath: paths.lockGuardPath,
    pidPath: paths.pidPath,
    probe,
    onTakeover: (deadPid) => {
      logger.warn({ deadPid }, 'took over the lock of a daemon that is gone');
    },
    onCompromised: (error) => {
      logger.error({ err: error }, 'daemon lock compromised; stopping');
      stop('lock compromised');
    },
  }).catch((error: unknown) => {
    if (alreadyRunning(error)) return null;
    throw error;
  });
  if (releaseLock === null) return 0;

  // A socket systemd listens on is its own: removing it would cut off every later client.
  if (activatedFd === null) {
    try {
      await clearStaleSocket(paths.socketPath);
    } catch (error) {
      await releaseLock();
      if (alreadyRunning(error)) return 0;
      throw error;
    }
  }

  try {
    const identity = await readPidRecord(paths.pidPath);
    const store = new TunnelStore(paths.statePath, logger.child({ module: 'state' }));
    // A daemon of an earlier layout (its lock was in its runtime dir) may still run on this state
    // dir: the ssh processes it recorded may be its own live tunnels, and are not killed.
    const stray = await strayAnswers(strays);
    if (stray) logger.warn({ sockets: strays }, 'a daemon of an earlier layout answers; its tunnels and containers are left alone');
    const reaped = stray ? 0 : await reapOrphans(
      await store.load(),
      {
        commandLine: (pid) => commandLine(pid, platform),
        kill: (pid, signal) => {
          try {
            process.kill(pid, signal);
          } catch {
            // it exited between the check and the signal
          }
        },
        sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      },
      logger,
    );
    if (reaped > 0) logger.warn({ reaped }, 'reaped tunnels left by a previous daemon');
    await store.clear();
    const daemon = createDaemon({
      uid: process.getuid?.() ?? 0,
      identity: { pid: process.pid, startTime: identity?.pid === process.pid ? identity.startTime : null },
      strayAnswers: () => strayAnswers(strays),
      onTunnelChild: (id, record) => {
        void store.set(id, record);
      },
      platform,
      paths,
      hostHome: home,
      clock: systemClock,
      probe,
      logger,
      logPath: logTarget.kind === 'file' ? logTarget.path : null,
      settings: { ...DEFAULT_SETTINGS, ...options.settings },
      requestShutdown: (reason) => {
        stop(reason);
      },
      privacy: { principal: { binary: await fs.realpath(process.execPath).catch(() => process.execPath), launchd: options.serviceManager === 'launchd' } },
    });
    await daemon.app.ready();
    // fastify's own listen({ fd }) crashes; its server listens on the fd after ready() instead.
    await listenOn(daemon.app.server, activatedFd === null ? { path: paths.socketPath } : { fd: activatedFd });
    daemon.start();
    // startupMs: from the process's start, runtime included, what an auto-starting client waits for.
    logger.info({ socket: paths.socketPath, version: VERSION, socketActivated: activatedFd !== null, startupMs: Math.round(performance.now()) }, 'listening');
    options.onListening?.(paths);

    const onSignal = (signal: NodeJS.Signals): void => {
      stop(signal);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    process.on('SIGHUP', onSignal);
    const code = await stopped;
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    process.off('SIGHUP', onSignal);

    const deadline = setTimeout(() => {
      logger.error('graceful stop overran its deadline; exiting');
      if (activatedFd === null) rmSync(paths.socketPath, { force: true });
      rmSync(paths.pidPath, { force: true });
      rmSync(paths.lockPath, { recursive: true, force: true });
      process.exit(1);
    }, SHUTDOWN_DEADLINE_MS);
    deadline.unref();
    await daemon.close();
    clearTimeout(deadline);
    logger.info('stopped');
    return code;
  } finally {
    if (activatedFd === null) await fs.rm(paths.socketPath, { force: true });
    await releaseLock();
  }
}
