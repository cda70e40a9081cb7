import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from '../os/logger.js';

/** An over-limit connection that never sends its request is closed after this long. */
const OVER_LIMIT_IDLE_MS = 2_000;

export interface ConnectionGuard {
  readonly limit: number;
  readonly open: number;
  /** The connection arrived while `limit` others were open: answer it DAEMON_BUSY and close it. */
  isOverLimit(socket: Socket): boolean;
}

/**
 * Every connection holds a file descriptor; past the limit the daemon answers DAEMON_BUSY instead
 * of serving, so a flood of clients cannot starve the fds its subprocesses and bridges need.
 */
export function guardConnections(server: Server, limit: number, logger: Logger): ConnectionGuard {
  let open = 0;
  const overLimit = new WeakSet<Socket>();
  server.on('connection', (socket: Socket) => {
    open += 1;
    socket.once('close', () => {
      open -= 1;
    });
    if (open <= limit) return;
    overLimit.add(socket);
    socket.setTimeout(OVER_LIMIT_IDLE_MS, () => {
      socket.destroy();
    });
  });
  // An accept() that fails (EMFILE) is reported here; with no listener it would kill the daemon.
  server.on('error', (error) => {
    logger.warn({ err: error, module: 'http' }, 'cannot accept a connection');
  });
  return {
    limit,
    get open() {
      return open;
    },
    isOverLimit: (socket) => overLimit.has(socket),
  };
}

/**
 * The soft RLIMIT_NOFILE (null when unlimited or unknown), read without spawning `ulimit`: from
 * /proc on Linux, else from node's diagnostic report, which gathers everything and costs a
 * daemon's start several milliseconds.
 */
export function openFilesSoftLimit(): number | null {
  let limits: string | null = null;
  try {
    limits = readFileSync('/proc/self/limits', 'utf8');
  } catch {
    const report = process.report.getReport() as { userLimits?: { open_files?: { soft?: unknown } } };
    const soft = report.userLimits?.open_files?.soft;
    return typeof soft === 'number' ? soft : null;
  }
  const soft = /^Max open files\s+(\d+)\s/m.exec(limits)?.[1];
  return soft === undefined ? null : Number(soft);
}

/** A quarter of the fds for connections leaves the rest to subprocess pipes, relays and tunnels. */
export function connectionLimitFor(softLimit: number | null): number {
  if (softLimit === null) return 4096;
  return Math.min(4096, Math.max(16, Math.floor(softLimit / 4)));
}
