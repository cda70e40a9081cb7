import { systemClock, type Clock } from '../../daemon/os/clock.js';
import { createDaemon, DEFAULT_SETTINGS, type Daemon, type DaemonSettings, type DaemonDeps } from '../../daemon/composition/daemon.js';
import type { ProcessProbe } from '../../daemon/os/process-identity.js';
import { createLogger } from '../../daemon/os/logger.js';
import { resolvePaths } from '../../shared/paths.js';

const EVERY_PID_ALIVE: ProcessProbe = {
  cheapStartTime: true,
  startTime: () => Promise.resolve('1'),
  isSame: () => Promise.resolve(true),
  startTimes: (pids) => Promise.resolve(new Map(pids.map((pid) => [pid, '1']))),
};

/**
 * The whole daemon in memory (STYLE 4), its dirs in `dir`; by default every client pid counts as
 * alive and the clocks are the real ones.
 */
export function memoryDaemon(dir: string, settings: Partial<DaemonSettings> = {}, probe: ProcessProbe = EVERY_PID_ALIVE, clock: Clock = systemClock, deps: Partial<DaemonDeps> = {}): Daemon {
  return createDaemon({
    platform: 'linux',
    paths: resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: dir }, uid: 0, home: dir }),
    hostHome: dir,
    clock,
    probe,
    logger: createLogger({ kind: 'silent' }),
    logPath: null,
    settings: { ...DEFAULT_SETTINGS, ...settings },
    uid: 0,
    identity: { pid: process.pid, startTime: null },
    strayAnswers: () => Promise.resolve(false),
    requestShutdown: () => undefined,
    onTunnelChild: () => undefined,
    ...deps,
  });
}
