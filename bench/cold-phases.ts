import { readFileSync } from 'node:fs';
import { median } from './stats.js';

/** One cold start as the daemon timed it: its phases up to listening, and its first plan. */
export interface ColdStart {
  /** The client's figure: from the acquire's call to its answer, the start included. */
  totalMs: number;
  phases: Record<string, number>;
  startupMs: number;
  startupCpuMs: number;
  acquireMs: number;
}

interface LogLine {
  msg?: string;
  phases?: Record<string, number>;
  startupMs?: number;
  startupCpuMs?: number;
  ms?: number;
}

/** The daemon's own timings of the start that just answered `totalMs`: its log's last `listening` and `session acquired` lines. */
export function coldStartOf(logPath: string, totalMs: number): ColdStart {
  const lines = readFileSync(logPath, 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as LogLine);
  const listening = lines.findLast((line) => line.msg === 'listening');
  const acquired = lines.findLast((line) => line.msg === 'session acquired');
  return { totalMs, phases: listening?.phases ?? {}, startupMs: listening?.startupMs ?? NaN, startupCpuMs: listening?.startupCpuMs ?? NaN, acquireMs: acquired?.ms ?? NaN };
}

const PHASES: Record<string, string> = {
  runtime: "node's own start (its bootstrap)",
  load: 'the daemon bundle read, compiled and evaluated',
  prepare: 'its directories made private, the log rotated',
  logger: 'the logger',
  lock: 'the instance lock and pid record, a stale socket cleared',
  leftovers: "what a previous daemon left: its tunnels reaped, its records read",
  compose: 'every service built, the routes put on fastify',
  ready: "fastify's plugins loaded",
  listen: 'the socket bound',
};

/** A row per phase of a cold start (medians over `starts`), then the first plan and what the client waited on besides. */
export function coldPhaseRows(starts: readonly ColdStart[]): [string, string, string][] {
  const names = [...new Set(starts.flatMap((start) => Object.keys(start.phases)))];
  const rows: [string, string, string][] = names.map((name) => [`    cold start: ${name}`, `${median(starts.map((start) => start.phases[name] ?? NaN)).toFixed(1)} ms`, PHASES[name] ?? '']);
  const startup = median(starts.map((start) => start.startupMs));
  const acquire = median(starts.map((start) => start.acquireMs));
  rows.push(
    ['    cold start: listening (startupMs)', `${startup.toFixed(0)} ms`, `CPU ${median(starts.map((start) => start.startupCpuMs)).toFixed(0)} ms (the process's, all threads)`],
    ['    cold start: the first plan, in the daemon', `${acquire.toFixed(1)} ms`, 'the acquire as the daemon timed it (session acquired, ms)'],
    [
      '    cold start: the client and its waits',
      `${median(starts.map((start) => start.totalMs - start.startupMs - start.acquireMs)).toFixed(0)} ms`,
      'the rest: before the spawn, the spawn, polling for the socket, the status call, the requests on the wire',
    ],
  );
  return rows;
}

/** One line for a kind of start: the daemon's start, its first plan and the rest, as medians. */
export function coldSummaryRow(name: string, starts: readonly ColdStart[]): [string, string, string] {
  const startup = median(starts.map((start) => start.startupMs));
  const acquire = median(starts.map((start) => start.acquireMs));
  const rest = median(starts.map((start) => start.totalMs - start.startupMs - start.acquireMs));
  return [name, `${startup.toFixed(0)} ms`, `to listening (load ${median(starts.map((start) => start.phases.load ?? NaN)).toFixed(0)} ms), then the first plan ${acquire.toFixed(1)} ms, the client and its waits ${rest.toFixed(0)} ms`];
}
