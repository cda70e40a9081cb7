import type { ProcessProbe } from '../../daemon/process-identity.js';

/** Stands in for /proc: which pids live, and with which start time. */
export function fakeProbe(): ProcessProbe & { processes: Map<number, string> } {
  const processes = new Map<number, string>();
  return {
    processes,
    startTime: (pid) => Promise.resolve(processes.get(pid) ?? null),
    isSame: (pid, startTime) => Promise.resolve(processes.has(pid) && (startTime === null || processes.get(pid) === startTime)),
    startTimes: (pids) => Promise.resolve(new Map(pids.filter((pid) => processes.has(pid)).map((pid) => [pid, processes.get(pid) ?? null]))),
  };
}
