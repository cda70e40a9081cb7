import { closeSync, fstatSync, mkdirSync, openSync, promises as fs, renameSync, writeSync } from 'node:fs';
import path from 'node:path';
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger };

/** Past this size the log is moved to `.1` (one previous file is kept), at start-up and while running. */
export const LOG_ROTATE_BYTES = 10 * 1024 * 1024;

export type LogTarget = { kind: 'file'; path: string; rotateBytes?: number } | { kind: 'stdout' } | { kind: 'silent' };

/**
 * A log file that stays under `limitBytes` (plus one line) however long the daemon runs: the size
 * is counted as lines are written, and past the limit the file becomes `<path>.1` and a fresh one
 * is opened. Writes are synchronous so the lines before a crash are not lost; a failed write or
 * rotation (a full disk, no fds left) drops lines rather than the daemon.
 */
export class RotatingFile implements DestinationStream {
  private fd: number;
  private size: number;

  constructor(
    private readonly file: string,
    private readonly limitBytes: number,
  ) {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    this.fd = openSync(file, 'a', 0o600);
    this.size = fstatSync(this.fd).size;
  }

  write(line: string): void {
    const bytes = Buffer.byteLength(line);
    if (this.size > 0 && this.size + bytes > this.limitBytes) this.rotate();
    try {
      writeSync(this.fd, line);
      this.size += bytes;
    } catch {
      // nowhere left to report it
    }
  }

  private rotate(): void {
    try {
      renameSync(this.file, `${this.file}.1`);
      const fresh = openSync(this.file, 'a', 0o600);
      closeSync(this.fd);
      this.fd = fresh;
      this.size = 0;
    } catch {
      // keep appending to the open file; the next line tries again
    }
  }
}

/** Structured JSON logs; the daemon logs a few lines per session, not per byte. */
export function createLogger(target: LogTarget, level = process.env.SANDBOXD_LOG_LEVEL ?? 'info'): Logger {
  if (target.kind === 'silent') return pino({ level: 'silent' });
  const destination =
    target.kind === 'stdout' ? pino.destination({ dest: 1, sync: true }) : new RotatingFile(target.path, target.rotateBytes ?? LOG_ROTATE_BYTES);
  // No line carries a secret; should one ever be handed a credential, its password is censored.
  const redact = { paths: ['password', '*.password'], censor: '[redacted]' };
  return pino({ level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime, redact }, destination);
}

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
