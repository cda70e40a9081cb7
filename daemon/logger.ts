import { promises as fs } from 'node:fs';
import pino, { type Logger } from 'pino';

export type { Logger };

export type LogTarget = { kind: 'file'; path: string } | { kind: 'stdout' } | { kind: 'silent' };

/**
 * Structured JSON logs. Written synchronously so the lines before a crash are not lost; the daemon
 * logs a few lines per session, not per byte.
 */
export function createLogger(target: LogTarget, level = process.env.SANDBOXD_LOG_LEVEL ?? 'info'): Logger {
  if (target.kind === 'silent') return pino({ level: 'silent' });
  const destination =
    target.kind === 'stdout'
      ? pino.destination({ dest: 1, sync: true })
      : pino.destination({ dest: target.path, sync: true, mkdir: true, mode: 0o600 });
  return pino({ level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, destination);
}

/** Past this size the log is rotated when the daemon starts; one previous file is kept. */
export const LOG_ROTATE_BYTES = 10 * 1024 * 1024;

/** Keeps the log bounded: `sandboxd.log` becomes `sandboxd.log.1`, replacing an older one. */
export async function rotateLog(logPath: string, limitBytes = LOG_ROTATE_BYTES): Promise<boolean> {
  try {
    if ((await fs.stat(logPath)).size < limitBytes) return false;
  } catch {
    return false;
  }
  await fs.rename(logPath, `${logPath}.1`);
  return true;
}
