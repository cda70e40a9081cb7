import type { ProcessProbe } from '../../daemon/os/process-identity.js';

/**
 * Stands in for /proc (`cheap`) or macOS's `ps`: which pids live, and with which start time.
 * `reads` counts the one-pid look-ups.
 */
export function fakeProbe(cheap = true): ProcessProbe & { processes: Map<number, string>; reads: number } {
  const processes = new Map<number, string>();
  return {
    processes,
    reads: 0,
    cheapStartTime: cheap,
    startTime(pid) {
      this.reads += 1;
      return Promise.resolve(processes.get(pid) ?? null);
    },
    isSame: (pid, startTime) => Promise.resolve(processes.has(pid) && (startTime === null || processes.get(pid) === startTime)),
    startTimes: (pids) => Promise.resolve(new Map(pids.filter((pid) => processes.has(pid)).map((pid) => [pid, processes.get(pid) ?? null]))),
  };
}
