import { lstatSync, type Stats } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../shared/errors.js';

const ELSEWHERE = 'or set SANDBOXD_RUNTIME_DIR to a directory of your own';

function insecure(message: string, remedy: string): SandboxdError {
  return new SandboxdError('INSECURE_DIRECTORY', `refusing to connect: ${message}`, { remedy });
}

/**
 * The synchronous lstat: two of them take microseconds, where the callback form waits on libuv's
 * thread pool, which a fresh process starts for it, and the promise API loads readline and the
 * file watchers first.
 */
function lstatOrNull(file: string): Stats | null {
  try {
    return lstatSync(file, { throwIfNoEntry: false }) ?? null;
  } catch (error) {
    throw insecure(`cannot check ${file}: ${(error as Error).message}`, `Make ${path.dirname(file)} reachable by you, ${ELSEWHERE}.`);
  }
}

/**
 * DESIGN §3: the socket is trusted only while its directory is the caller's and closed to others
 * and the socket is the caller's. A directory in /tmp can be created first by another user, who
 * could then answer with a plan of their choosing, so this runs before every connect and before
 * a single byte is sent. Nothing is cached: a directory swapped between two calls is caught by
 * the next one.
 */
// eslint-disable-next-line @typescript-eslint/require-await -- a rejection, never a throw, is what every caller handles
export async function assertTrustedSocket(socketPath: string, uid = process.getuid?.() ?? 0): Promise<void> {
  const dir = path.dirname(socketPath);
  const dirStat = lstatOrNull(dir);
  if (dirStat === null) {
    throw new SandboxdError('DAEMON_NOT_RUNNING', `no daemon is listening on ${socketPath}`);
  }
  if (!dirStat.isDirectory()) {
    throw insecure(`${dir} is not a directory (a symlink or file is in the way)`, `Remove ${dir}, ${ELSEWHERE}.`);
  }
  if (dirStat.uid !== uid) {
    throw insecure(
      `${dir} is owned by uid ${dirStat.uid}, not by you (uid ${uid}); another user may be posing as sandboxd`,
      `Remove ${dir} (it is not yours; ask an administrator if you cannot), ${ELSEWHERE}.`,
    );
  }
  if ((dirStat.mode & 0o077) !== 0) {
    throw insecure(`${dir} has mode 0${(dirStat.mode & 0o777).toString(8)}; it must be at most 0700`, `Run \`chmod 0700 ${dir}\`.`);
  }
  const socketStat = lstatOrNull(socketPath);
  if (socketStat !== null && socketStat.uid !== uid) {
    throw insecure(
      `${socketPath} is owned by uid ${socketStat.uid}, not by you (uid ${uid}); another user may be posing as sandboxd`,
      `Remove ${socketPath}, ${ELSEWHERE}.`,
    );
  }
}
