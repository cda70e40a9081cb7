import type { ProcessProbe } from '../../daemon/os/process-identity.js';

/**
 * Stands in for /proc (`cheap`) or macOS's `ps`: which pids live, and with which start time.
 * `reads` counts the one-pid look-ups; `stopped` are the live pids stopped by Ctrl-Z.
 */
export function fakeProbe(cheap = true): ProcessProbe & { processes: Map<number, string>; stopped: Set<number>; reads: number } {
  const processes = new Map<number, string>();
  const stopped = new Set<number>();
  return {
    processes,
    stopped,
    reads: 0,
    cheapStartTime: cheap,
    startTime(pid) {
      this.reads += 1;
      return Promise.resolve(processes.get(pid) ?? null);
    },
    isSame: (pid, startTime) => Promise.resolve(processes.has(pid) && (startTime === null || processes.get(pid) === startTime)),
    startTimes: (pids) => {
      const live = pids.filter((pid) => processes.has(pid));
      return Promise.resolve(Object.assign(new Map(live.map((pid) => [pid, processes.get(pid) ?? null])), { stopped: new Set(live.filter((pid) => stopped.has(pid))) }));
    },
  };
}
