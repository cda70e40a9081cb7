import { spawn } from 'node:child_process';
import type { SandboxdPaths } from '../../shared/paths.js';
import type { SpawnSsh } from '../bridges/tunnels/tunnel.js';
import { systemClock, systemTimers, type Clock, type Timers } from '../os/clock.js';
import { LookWorker, startLookThread } from '../os/look-worker.js';
import { packageFile } from '../os/package-files.js';
import { createSubprocessRunner, type RunSubprocess, type SubprocessEvent } from '../os/subprocess.js';

/**
 * Everything the daemon's services reach the machine through, other than the files they own: a
 * test builds the daemon with one of these swapped (a fake clock that also moves the timers, a
 * runner that records or answers), never by replacing a module.
 */
export interface DaemonEdges {
  /** The one subprocess runner: its limiter bounds every git, podman and docker the daemon runs. */
  run: RunSubprocess;
  /** `ssh` for tunnels and VM probes: long-lived, with its pipes, so not through `run`. */
  spawnSsh: SpawnSsh;
  clock: Clock;
  /** Read with `clock.monotonic`: a fake clock comes with timers that fire as it advances. */
  timers: Timers;
  /** The daemon's own known_hosts for Podman machines, apart from the user's. */
  knownHostsPath: string;
  /** File looks off the main thread (the look worker), with the main thread's own looks as their fallback. */
  looks: LookWorker;
}

/** The look worker's program, bundled beside the daemon's (scripts/bundle.js). */
export const LOOK_THREAD = packageFile('dist', 'bin', 'entries', 'look-thread.cjs');

/** The real edges; `observe` hears of every subprocess (the debug log). */
export function realEdges(paths: SandboxdPaths, observe?: (event: SubprocessEvent) => void): DaemonEdges {
  return {
    run: createSubprocessRunner({ observe }),
    spawnSsh: (args) => spawn('ssh', args, { stdio: ['pipe', 'pipe', 'pipe'] }),
    clock: systemClock,
    timers: systemTimers,
    knownHostsPath: paths.knownHostsPath,
    looks: new LookWorker({ start: () => startLookThread(LOOK_THREAD), timers: systemTimers }),
  };
}
