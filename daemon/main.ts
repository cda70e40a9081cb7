import { promises as fs, rmSync } from 'node:fs';
import os from 'node:os';
import { SandboxdError } from '../shared/errors.js';
import { assertSocketPathFits, currentPlatform, otherLayoutSockets, resolvePaths, type Platform, type SandboxdPaths } from '../shared/paths.js';
import { createDaemon } from './composition/daemon.js';
import { DEFAULT_SETTINGS, type DaemonDeps, type DaemonSettings } from './composition/daemon-deps.js';
import { realEdges } from './composition/edges.js';
import { acquireInstanceLock, type ReleaseLock } from './lifecycle/instance-lock.js';
import { clearStaleSocket, listenOn, strayAnswers } from './lifecycle/daemon-socket.js';
import { closeWithin, StopSignal } from './lifecycle/stop-signal.js';
import { clip } from './os/text.js';
import { privacyPrincipal } from './os/privacy.js';
import { createLogger, rotateLog, type Logger, type LogTarget } from './os/logger.js';
import { commandLine, createProcessProbe, readPidRecord, type ProcessProbe } from './os/process-identity.js';
import { ensureOwnDir, ensureSecureDir } from './os/secure-dir.js';
import { VERSION } from './os/package-files.js';
import { reapOrphans, TunnelStore } from './bridges/tunnels/tunnel-store.js';
import { inheritedListenFd, scrubActivationEnv } from './lifecycle/socket-activation.js';
import { StartupTimings } from './lifecycle/startup-timings.js';

/** SIGTERM/SIGINT/shutdown must finish within 5 s; past this we clean up by hand and exit. */
const SHUTDOWN_DEADLINE_MS = 4_500;

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

/** The daemon's directories, made private before anything is written; the log opened in its own. */
async function prepare(paths: SandboxdPaths, platform: Platform, log: RunDaemonOptions['log']): Promise<LogTarget> {
  assertSocketPathFits(paths.socketPath, platform);
  await ensureSecureDir(paths.runtimeDir);
  await ensureOwnDir(paths.emptyDir, 0o555);
  await ensureSecureDir(paths.stateDir);
  if (log === 'stdout') return { kind: 'stdout' };
  await ensureSecureDir(paths.logDir);
  await rotateLog(paths.logPath);
  return { kind: 'file', path: paths.logPath };
}

/**
 * Kills the tunnels a previous daemon recorded and left running. A daemon of an earlier layout
 * (its lock was in its runtime dir) may still run on this state dir: the ssh processes it recorded
 * may be its own live tunnels, and are not killed.
 */
async function reapLeftTunnels(store: TunnelStore, strays: readonly string[], platform: Platform, logger: Logger): Promise<void> {
  const stray = await strayAnswers(strays);
  if (stray) logger.warn({ sockets: strays }, 'a daemon of an earlier layout answers; its tunnels and containers are left alone');
  const kill = (pid: number, signal: NodeJS.Signals): void => {
    try {
      process.kill(pid, signal);
    } catch {
      // it exited between the check and the signal
    }
  };
  const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
  const reaped = stray ? 0 : await reapOrphans(await store.load(), { commandLine: (pid) => commandLine(pid, platform), kill, sleep }, logger);
  if (reaped > 0) logger.warn({ reaped }, 'reaped tunnels left by a previous daemon');
  await store.clear();
}

/** The instance lock, or null when another daemon serves and a service manager started this one. */
async function lockInstance(paths: SandboxdPaths, probe: ProcessProbe, logger: Logger, stop: StopSignal, alreadyRunning: (error: unknown) => boolean): Promise<ReleaseLock | null> {
  return acquireInstanceLock({
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
      stop.stop('lock compromised');
    },
  }).catch((error: unknown) => {
    if (alreadyRunning(error)) return null;
    throw error;
  });
}

interface Prepared {
  paths: SandboxdPaths;
  platform: Platform;
  home: string;
  uid: number;
  strays: readonly string[];
  probe: ProcessProbe;
  logger: Logger;
  logTarget: LogTarget;
  stop: StopSignal;
  options: RunDaemonOptions;
}

/** The real edges and this process's place, once what a previous daemon left is cleared. */
async function realDaemonDeps(prepared: Prepared): Promise<DaemonDeps> {
  const { paths, platform, strays, logger, options } = prepared;
  const pidRecord = await readPidRecord(paths.pidPath);
  const store = new TunnelStore(paths.statePath, logger.child({ module: 'state' }));
  await reapLeftTunnels(store, strays, platform, logger);
  const edges = realEdges(paths, (event) => {
    logger.debug({ module: 'subprocess', file: event.file, args: event.args.slice(0, 16).map((arg) => clip(arg)), exitCode: event.exitCode, ms: event.ms }, 'subprocess');
  });
  return {
    edges,
    uid: prepared.uid,
    gid: process.getgid?.() ?? 0,
    identity: { pid: process.pid, startTime: pidRecord?.pid === process.pid ? pidRecord.startTime : null },
    strayAnswers: () => strayAnswers(strays),
    onTunnelChild: (id, record) => {
      void store.set(id, record);
    },
    platform,
    paths,
    hostHome: prepared.home,
    probe: prepared.probe,
    logger,
    logPath: prepared.logTarget.kind === 'file' ? prepared.logTarget.path : null,
    settings: { ...DEFAULT_SETTINGS, ...options.settings },
    requestShutdown: prepared.stop.stop,
    privacy: { principal: privacyPrincipal({ binary: await fs.realpath(process.execPath).catch(() => process.execPath), serviceManager: options.serviceManager, env: options.env }) },
  };
}

/** The foreground daemon: wires the real edges, runs until a signal or /v1/shutdown. */
export async function runDaemon(options: RunDaemonOptions): Promise<number> {
  const timings = new StartupTimings();
  const platform = currentPlatform();
  const home = os.homedir();
  const uid = process.getuid?.() ?? 0;
  const activatedFd = inheritedListenFd(options.env, process.pid);
  scrubActivationEnv(options.env);
  scrubActivationEnv(process.env);
  const pathInputs = { platform, env: options.env, uid, home };
  const paths = resolvePaths(pathInputs);
  const strays = otherLayoutSockets(pathInputs, paths);
  const logTarget = await prepare(paths, platform, options.log);
  timings.mark('prepare');
  const logger = createLogger(logTarget);
  timings.mark('logger');
  const probe = createProcessProbe(platform);
  const stop = new StopSignal(logger);
  const alreadyRunning = (error: unknown): boolean => {
    if (options.serviceManager === undefined || !(error instanceof SandboxdError && error.code === 'DAEMON_ALREADY_RUNNING')) return false;
    logger.info({ serviceManager: options.serviceManager, reason: error.message }, 'another daemon serves; leaving it to');
    options.onAlreadyRunning?.(error.message);
    return true;
  };
  const releaseLock = await lockInstance(paths, probe, logger, stop, alreadyRunning);
  if (releaseLock === null) return 0;
  // A socket systemd listens on is its own: removing it would cut off every later client.
  const socketPath = activatedFd === null ? paths.socketPath : null;
  try {
    if (socketPath !== null) await clearStaleSocket(socketPath);
    timings.mark('lock');
  } catch (error) {
    await releaseLock();
    if (alreadyRunning(error)) return 0;
    throw error;
  }

  try {
    const deps = await realDaemonDeps({ paths, platform, home, uid, strays, probe, logger, logTarget, stop, options });
    timings.mark('leftovers');
    const daemon = createDaemon(deps);
    timings.mark('compose');
    await daemon.app.ready();
    timings.mark('ready');
    // fastify's own listen({ fd }) crashes; its server listens on the fd after ready() instead.
    await listenOn(daemon.app.server, activatedFd === null ? { path: paths.socketPath } : { fd: activatedFd });
    timings.mark('listen');
    daemon.start();
    // startupMs: from the process's start, runtime included, what an auto-starting client waits for.
    logger.info({ socket: paths.socketPath, version: VERSION, socketActivated: activatedFd !== null, ...timings.summary() }, 'listening');
    options.onListening?.(paths);

    const code = await stop.untilStopped();
    await closeWithin(() => daemon.close(), SHUTDOWN_DEADLINE_MS, () => {
      logger.error('graceful stop overran its deadline; exiting');
      if (socketPath !== null) rmSync(socketPath, { force: true });
      rmSync(paths.pidPath, { force: true });
      rmSync(paths.lockPath, { recursive: true, force: true });
      process.exit(1);
    });
    logger.info('stopped');
    return code;
  } finally {
    if (socketPath !== null) await fs.rm(socketPath, { force: true });
    await releaseLock();
  }
}
