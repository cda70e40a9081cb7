import { SandboxdError } from '../../shared/errors.js';

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `10m`, `2h`, `1d` (as `docker logs --since` takes them) in milliseconds. */
export function parseDuration(text: string, option: string): number {
  const match = /^(\d+(?:\.\d+)?)([smhd])$/.exec(text.trim());
  const unit = match?.[2] === undefined ? undefined : UNITS[match[2]];
  if (match?.[1] === undefined || unit === undefined) {
    throw new SandboxdError('USAGE', `${option} must be a duration like 90s, 10m, 2h or 1d, got "${text}"`, { remedy: `For example ${option} 10m.` });
  }
  return Number(match[1]) * unit;
}

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** Shown in their own columns, or noise for a person (the pid is the daemon's, on every line). */
const FIXED = new Set(['time', 'level', 'msg', 'module', 'sessionId', 'tunnelId', 'bridgeId', 'pid', 'hostname']);

export interface LogRecord {
  time: string;
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** One pino line, or null for a line that is not one (a partial write, another tool's output). */
export function parseLine(line: string): LogRecord | null {
  try {
    const value: unknown = JSON.parse(line);
    if (typeof value !== 'object' || value === null) return null;
    const record = value as Partial<LogRecord>;
    if (typeof record.time !== 'string' || typeof record.level !== 'number') return null;
    return { ...record, time: record.time, level: record.level, msg: typeof record.msg === 'string' ? record.msg : '' };
  } catch {
    return null;
  }
}

function show(value: unknown): string {
  if (typeof value === 'string') return /\s/.test(value) ? JSON.stringify(value) : value;
  if (typeof value === 'object' && value !== null && 'message' in value && typeof value.message === 'string') return JSON.stringify(value.message);
  return JSON.stringify(value);
}

/** `time LEVEL module id  message key=value…`: the JSON log, readable for people. */
export function formatRecord(record: LogRecord): string {
  const id = [record.sessionId, record.tunnelId, record.bridgeId].find((value) => typeof value === 'string');
  const module = typeof record.module === 'string' ? record.module : '-';
  const extra = Object.entries(record)
    .filter(([key]) => !FIXED.has(key))
    .map(([key, value]) => `${key}=${show(value)}`);
  const level = (LEVELS[record.level] ?? String(record.level)).padEnd(5);
  const head = [record.time, level, module.padEnd(8), ...(typeof id === 'string' ? [id] : [])].join(' ');
  return `${head}  ${record.msg}${extra.length === 0 ? '' : `  ${extra.join(' ')}`}`;
}

export function isSince(record: LogRecord, sinceMs: number | null, now: number): boolean {
  return sinceMs === null || Date.parse(record.time) >= now - sinceMs;
}
