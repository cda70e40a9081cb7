import { CODE_CACHE_MARK } from '../os/clock.js';

/**
 * The daemon's start, phase by phase, on the monotonic clock from the process's start: what an
 * auto-starting client waits for, logged with the `listening` line so a slow start can be told
 * apart (the bench prints each phase). Node's own start comes first: the runtime's bootstrap, then
 * loading this bundle (read, compiled and evaluated), which ends when `begin` is called.
 */
export class StartupTimings {
  private readonly phases: Record<string, number> = {};
  private last: number;

  constructor(
    private readonly now: () => number = () => performance.now(),
    bootstrap: number = performance.nodeTiming.bootstrapComplete,
  ) {
    this.last = now();
    this.phases.runtime = round(bootstrap);
    this.phases.load = round(this.last - bootstrap);
  }

  /** The phase that ends now, named for what it did. */
  mark(phase: string): void {
    const at = this.now();
    this.phases[phase] = round(at - this.last);
    this.last = at;
  }

  /**
   * Each phase's milliseconds, in the order they ran, and their sum: the process's age; and the CPU
   * it took, which a machine busy with other work inflates far less than the wall time.
   */
  summary(): { phases: Record<string, number>; startupMs: number; startupCpuMs: number; codeCache: unknown } {
    const cpu = process.cpuUsage();
    // How V8's code cache served the bundle's load, when the `sandboxd` entry loaded it.
    const codeCache = performance.getEntriesByName(CODE_CACHE_MARK)[0] as { detail?: unknown } | undefined;
    return { phases: { ...this.phases }, startupMs: Math.round(this.last), startupCpuMs: Math.round((cpu.user + cpu.system) / 1000), codeCache: codeCache?.detail ?? null };
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
