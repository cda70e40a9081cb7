import { lstat, type Stats } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../shared/errors.js';
import { otherLayoutSockets, type PathInputs, type SandboxdPaths } from '../shared/paths.js';
import { readAnyStatus } from './any-status.js';

/** A socket where an earlier layout put the daemon: a stray daemon answers there, or nothing does. */
export interface OtherDaemon {
  socketPath: string;
  /** The stray's pid and version when one answers; null when the socket is left over. */
  daemon: { pid: number | null; version: string | null } | null;
  /** Why it could not be asked (its directory is not yours, say); null when it could. */
  problem: string | null;
}

function lstatOrNull(file: string): Promise<Stats | null> {
  return new Promise((resolve) => {
    lstat(file, (error, stats) => {
      resolve(error === null ? stats : null);
    });
  });
}

/**
 * The daemons and sockets of earlier layouts (shared/paths.ts, otherLayoutSockets) for `status`
 * and `doctor`: one lstat per place when nothing is there, a status call when a socket is.
 */
export async function findOtherDaemons(inputs: PathInputs, paths: SandboxdPaths): Promise<OtherDaemon[]> {
  const found = await Promise.all(
    otherLayoutSockets(inputs, paths).map(async (socketPath): Promise<OtherDaemon | null> => {
      if ((await lstatOrNull(socketPath))?.isSocket() !== true) return null;
      try {
        const status = await readAnyStatus(socketPath);
        return { socketPath, daemon: { pid: status.pid ?? null, version: status.version ?? null }, problem: null };
      } catch (error) {
        if (error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING') return { socketPath, daemon: null, problem: null };
        return { socketPath, daemon: null, problem: error instanceof Error ? error.message : String(error) };
      }
    }),
  );
  return found.filter((other) => other !== null);
}

/** One warning per stray daemon or leftover socket, each with what to do. */
export function otherDaemonWarnings(others: readonly OtherDaemon[]): { detail: string; remedy: string }[] {
  return others.map(({ socketPath, daemon, problem }) => {
    if (daemon !== null) {
      const pid = daemon.pid === null ? 'pid unknown' : `pid ${String(daemon.pid)}`;
      return {
        detail: `another sandboxd (${pid}, ${daemon.version ?? 'version unknown'}) answers on ${socketPath}, where an earlier release put the daemon; it may act on the same state dir`,
        remedy: daemon.pid === null ? `Stop it: \`SANDBOXD_RUNTIME_DIR=${path.dirname(socketPath)} sandboxd stop\`.` : `Stop it: \`kill ${String(daemon.pid)}\`.`,
      };
    }
    if (problem !== null) return { detail: `${socketPath} cannot be asked: ${problem}`, remedy: `Remove it if it is yours: \`rm ${socketPath}\`.` };
    return { detail: `${socketPath} is left over from an earlier release's layout; nothing answers there`, remedy: `Remove it: \`rm ${socketPath}\`.` };
  });
}
