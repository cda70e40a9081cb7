import { connect } from 'node:net';

/**
 * Whether something listens on the Unix socket at `socketPath`: a connect that succeeds (a stopped
 * process's socket accepts too, into its backlog). A socket left by a process that died refuses
 * the connection; no file is no listener. Bounded by `timeoutMs`, past which it counts as a
 * listener: a socket that neither accepts nor refuses is not safe to take over.
 */
export function socketAnswers(socketPath: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ path: socketPath });
    const done = (answers: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answers);
    };
    const timer = setTimeout(() => {
      done(true);
    }, timeoutMs);
    socket.once('connect', () => {
      done(true);
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      done(error.code !== 'ECONNREFUSED' && error.code !== 'ENOENT' && error.code !== 'ENOTSOCK');
    });
  });
}
