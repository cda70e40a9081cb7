import { promises as fs } from 'node:fs';
import type { Server } from 'node:net';
import { SandboxdError } from '../../shared/errors.js';
import { withUmask } from '../os/secure-dir.js';
import { socketAnswers } from '../os/socket-probe.js';

/** A listener accepts at once, even a stopped one (into its backlog); a dead one's socket refuses. */
const SOCKET_PROBE_MS = 1_000;

/**
 * Removes a socket left by a dead daemon; only called while holding the instance lock. That lock
 * is the state dir's, so a socket something still answers on is another daemon's (one of another
 * state dir given the same SANDBOXD_RUNTIME_DIR): it is never taken from under it (STYLE 5).
 */
export async function clearStaleSocket(socketPath: string): Promise<void> {
  try {
    const stat = await fs.lstat(socketPath);
    if (!stat.isSocket()) {
      throw new SandboxdError('INSECURE_DIRECTORY', `${socketPath} exists and is not a socket`, {
        remedy: `Remove ${socketPath} by hand; sandboxd only deletes its own sockets.`,
      });
    }
    if (await socketAnswers(socketPath, SOCKET_PROBE_MS)) {
      throw new SandboxdError('DAEMON_ALREADY_RUNNING', `another daemon answers on ${socketPath}`, {
        remedy: 'Stop it (`sandboxd status` names its pid), or give each state dir its own SANDBOXD_RUNTIME_DIR.',
      });
    }
    await fs.rm(socketPath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

/** Whether a daemon of an earlier layout (a stray that may share this state dir) answers. */
export async function strayAnswers(sockets: readonly string[]): Promise<boolean> {
  const answers = await Promise.all(sockets.map((socket) => socketAnswers(socket, SOCKET_PROBE_MS)));
  return answers.includes(true);
}

/** `target`: the socket path to create, or a listening fd a service manager handed over. */
export function listenOn(server: Server, target: { path: string } | { fd: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.off('error', reject);
      resolve();
    };
    // umask 0177: the socket is 0600 from the moment it exists (DESIGN §3), never chmod-ed. With the
    // 0700 directory this is the peer check: connect() needs write permission on the socket, so
    // only this uid (and root) can reach it. Node exposes no SO_PEERCRED/getpeereid to ask again.
    // An inherited socket was made by systemd with the unit's SocketMode=0600.
    if ('fd' in target) server.listen({ fd: target.fd }, listening);
    else withUmask(0o177, () => server.listen(target.path, listening));
  });
}
