import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { readStateFile } from './state-file.js';
import type { Platform } from '../../shared/paths.js';

/**
 * Live pids mapped to their start time (null when it cannot be read); a pid that exited or is a
 * zombie is absent. A zombie has already exited: only its parent's wait() is missing, and an
 * auto-started daemon's parent may never call it. `stopped` holds the live pids that are stopped
 * (Ctrl-Z): they send no heartbeats, yet are not gone.
 */
export type StartTimes = ReadonlyMap<number, string | null> & { readonly stopped?: ReadonlySet<number> };

/** A stopped process's state letter: `T` (stopped by a signal) or Linux's `t` (stopped by a tracer). */
export function isStoppedState(state: string): boolean {
  return state.startsWith('T') || state.startsWith('t');
}

function withStopped(times: Map<number, string | null>, stopped: ReadonlySet<number>): StartTimes {
  return Object.assign(times, { stopped });
}

/**
 * Tells whether a pid is still the process we saw. A start time recorded with the pid guards
 * against the pid being reused by an unrelated process after the original one died.
 */
export interface ProcessProbe {
  /**
   * Whether one pid's start time is a file read (Linux's /proc) rather than a subprocess (macOS's
   * `ps`): only then does an acquire wait for it, so no acquire waits on a subprocess.
   */
  readonly cheapStartTime: boolean;
  /** null when the pid is gone or its start time cannot be read. */
  startTime(pid: number): Promise<string | null>;
  isSame(pid: number, startTime: string | null): Promise<boolean>;
  /** All of `pids` in one look-up (one `ps` on macOS): what a sweep over many sessions calls. */
  startTimes(pids: readonly number[]): Promise<StartTimes>;
}

/** Whether `pid`, looked up in `times`, is the process recorded with `expected`. */
export function sameProcess(times: StartTimes, pid: number, expected: string | null): boolean {
  if (!times.has(pid)) return false;
  const current = times.get(pid) ?? null;
  return current === null || expected === null || current === expected;
}

export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Runs `ps` with `env` added to this process's environment; exitCode null when it could not run. */
export type PsRunner = (args: readonly string[], env: Readonly<Record<string, string>>) => Promise<{ exitCode: number | null; stdout: string }>;

const PS_TIMEOUT_MS = 2_000;

const runPs: PsRunner = (args, env) =>
  new Promise((resolve) => {
    execFile('ps', [...args], { env: { ...process.env, ...env }, timeout: PS_TIMEOUT_MS }, (error, stdout) => {
      const code = error === null ? 0 : (error as { code?: unknown }).code;
      resolve({ exitCode: typeof code === 'number' ? code : null, stdout });
    });
  });

/**
 * /proc/<pid>/stat, read at once: procfs answers from the kernel and never waits on a disk, so
 * the read costs microseconds, where an open, a read and a close through the thread pool cost
 * every acquire three hops (and a sweep of a thousand sessions three thousand).
 */
function readProcStat(pid: number): string {
  return readFileSync(`/proc/${pid}/stat`, 'utf8');
}

/** /proc/<pid>/stat: field 3 is the state, field 22 the start time in clock ticks since boot. */
function linuxEntry(pid: number): { pid: number; startTime: string | null; stopped: boolean } | null {
  let stat: string;
  try {
    stat = readProcStat(pid);
  } catch {
    // hidepid can hide a live process; kill(0) still tells whether it exists.
    return pidExists(pid) ? { pid, startTime: null, stopped: false } : null;
  }
  // comm (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = fields[0] ?? '';
  if (state === 'Z' || state === 'X') return null;
  return { pid, startTime: fields[19] ?? null, stopped: isStoppedState(state) };
}

function linuxStartTimes(pids: readonly number[]): Promise<StartTimes> {
  const entries = [...new Set(pids)].map(linuxEntry).filter((entry) => entry !== null);
  return Promise.resolve(withStopped(new Map(entries.map((entry) => [entry.pid, entry.startTime])), new Set(entries.filter((entry) => entry.stopped).map((entry) => entry.pid))));
}

/**
 * `lstart` is printed in the caller's locale and timezone; forcing C and UTC makes the same
 * process read the same after the Mac changes timezone or from a shell with another LANG.
 */
export const PS_ENV: Readonly<Record<string, string>> = { LC_ALL: 'C', TZ: 'UTC' };
const PS_LINE = /^\s*(\d+)\s+(\S+)\s+(\S.*?)\s*$/;

async function psStartTimes(pids: readonly number[], run: PsRunner): Promise<StartTimes> {
  const unique = [...new Set(pids)];
  if (unique.length === 0) return new Map();
  // One -o per column: BSD ps takes everything after `=` as the header, commas included.
  const result = await run(['-o', 'pid=', '-o', 'stat=', '-o', 'lstart=', '-p', unique.join(',')], PS_ENV);
  if (result.exitCode === null) {
    // ps could not run: keep what kill(0) says exists rather than declare every client dead.
    return new Map(unique.filter(pidExists).map((pid) => [pid, null]));
  }
  return parsePsStartTimes(result.stdout);
}

/** `ps -o pid= -o stat= -o lstart=` lines: BSD `stat` begins with the state letter (`T` stopped, `Z` zombie). */
export function parsePsStartTimes(stdout: string): StartTimes {
  const times = new Map<number, string | null>();
  const stopped = new Set<number>();
  for (const line of stdout.split('\n')) {
    const match = PS_LINE.exec(line);
    if (match === null) continue;
    const [, pid = '', state = '', lstart = ''] = match;
    if (state.startsWith('Z')) continue;
    times.set(Number(pid), lstart.replace(/\s+/g, ' '));
    if (isStoppedState(state)) stopped.add(Number(pid));
  }
  return withStopped(times, stopped);
}

type StartTimesLookup = (pids: readonly number[]) => Promise<StartTimes>;

/**
 * One `ps` for every pid asked for together: after a daemon restart each live client renews its
 * lease at once, and each renewal reads its client's start time; a `ps` apiece (eight at a time,
 * each bounded at 2 s) would outlast their patience. At most one look-up runs; what is asked for
 * meanwhile joins the next one, which starts when it ends.
 */
function coalesced(lookup: StartTimesLookup): StartTimesLookup {
  let next: { pids: Set<number>; result: Promise<StartTimes> } | null = null;
  let running: Promise<unknown> = Promise.resolve();
  return (pids) => {
    if (next === null) {
      const pidsOfBatch = new Set<number>();
      const batch = {
        pids: pidsOfBatch,
        result: running.then(() => {
          if (next === batch) next = null;
          return lookup([...pidsOfBatch]);
        }),
      };
      running = batch.result.catch(() => undefined);
      next = batch;
    }
    for (const pid of pids) next.pids.add(pid);
    return next.result;
  };
}

/** `runner` stands in for macOS's `ps` in tests; Linux reads /proc and spawns nothing. */
export function createProcessProbe(platform: Platform, runner: PsRunner = runPs): ProcessProbe {
  const startTimes = platform === 'linux' ? linuxStartTimes : coalesced((pids) => psStartTimes(pids, runner));
  return {
    cheapStartTime: platform === 'linux',
    startTimes,
    async startTime(pid) {
      return (await startTimes([pid])).get(pid) ?? null;
    },
    async isSame(pid, expected) {
      return sameProcess(await startTimes([pid]), pid, expected);
    },
  };
}

/** The command line of a live pid (null when gone), to check a recorded pid is still ours. */
export async function commandLine(pid: number, platform: Platform, runner: PsRunner = runPs): Promise<string | null> {
  if (!pidExists(pid)) return null;
  if (platform === 'linux') {
    try {
      const raw = await readFile(`/proc/${pid}/cmdline`, 'utf8');
      return raw === '' ? null : raw.split('\0').join(' ');
    } catch {
      return null;
    }
  }
  const result = await runner(['-o', 'command=', '-p', String(pid)], PS_ENV);
  return result.exitCode === 0 ? result.stdout.trim() : null;
}

/** The daemon's pid file: its pid and start time, so a reused pid is told apart. */
export interface PidRecord {
  pid: number;
  startTime: string | null;
}

/** Clients read it too (`stop`, auto-start), so it lives apart from the lock and its library. */
export async function readPidRecord(pidPath: string): Promise<PidRecord | null> {
  try {
    // The daemon writes it; a client reads it too, so what is not a regular file is only refused.
    const text = await readStateFile(pidPath, { maxBytes: 4096 });
    if (text === null) return null;
    const parsed = JSON.parse(text) as Partial<PidRecord>;
    return typeof parsed.pid === 'number' ? { pid: parsed.pid, startTime: parsed.startTime ?? null } : null;
  } catch {
    return null;
  }
}
