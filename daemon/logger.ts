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
