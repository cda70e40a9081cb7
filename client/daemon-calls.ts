import { READABLE_ROUTE, ReadableResponse, SHUTDOWN_ROUTE, ShutdownResponse, type StatusResponse } from '../shared/contracts/status.js';
import { fetchStatus } from './daemon-status.js';
import { clientPaths } from './connection.js';
import { request } from './transport.js';

/*
 * The calls about the daemon itself, apart from admin.ts's: `sandboxd status` and `stop` load only
 * the status contract, not the session and tunnel schemas: each schema loaded costs start-up time.
 * Neither call starts a daemon.
 */

export function getStatus(env: NodeJS.ProcessEnv = process.env): Promise<StatusResponse> {
  return fetchStatus(clientPaths(env).socketPath);
}

export async function requestShutdown(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const { socketPath } = clientPaths(env);
  // Every release answers shutdown in this shape: `stop` and `restart` reach an older daemon too.
  await request({ socketPath, method: 'POST', route: SHUTDOWN_ROUTE, anyProtocol: true, closeConnection: true }, ShutdownResponse);
}

/** Whether the running daemon may read `dir` (macOS privacy judges it apart from this terminal). */
export function checkReadable(dir: string, env: NodeJS.ProcessEnv = process.env): Promise<ReadableResponse> {
  return request({ socketPath: clientPaths(env).socketPath, method: 'POST', route: READABLE_ROUTE, body: { path: dir } }, ReadableResponse);
}
