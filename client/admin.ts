import {
  BridgeListResponse,
  BridgeRemoveResponse,
  BridgeResponse,
  TUNNELS_ROUTE,
  tunnelRestartRoute,
  tunnelRoute,
  type BridgeInfo,
} from '../shared/contracts/bridges.js';
import { SESSIONS_ROUTE, SessionListResponse, SessionRemoveResponse, sessionRemoveRoute, type SessionInfo } from '../shared/contracts/sessions.js';
import { clientPaths } from './connection.js';
import { request } from './transport.js';

/** Read-only and admin calls on sessions and tunnels; none of them starts a daemon. */

export async function listSessions(env: NodeJS.ProcessEnv = process.env): Promise<SessionInfo[]> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'GET', route: SESSIONS_ROUTE }, SessionListResponse)).sessions;
}

/**
 * Ends a session and stops and removes its container (what the daemon does when the client dies);
 * resolves to the ids removed. The engine gets up to 25 s (`ps`, then `rm -f`).
 */
export async function removeSession(id: string, env: NodeJS.ProcessEnv = process.env): Promise<string[]> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'DELETE', route: sessionRemoveRoute(id), timeoutMs: 30_000 }, SessionRemoveResponse)).containers;
}

export async function listTunnels(env: NodeJS.ProcessEnv = process.env): Promise<BridgeInfo[]> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'GET', route: TUNNELS_ROUTE }, BridgeListResponse)).tunnels;
}

export async function restartTunnel(id: string, env: NodeJS.ProcessEnv = process.env): Promise<BridgeInfo> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'POST', route: tunnelRestartRoute(id), timeoutMs: 30_000 }, BridgeResponse)).tunnel;
}

export async function removeTunnel(id: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const { socketPath } = clientPaths(env);
  await request({ socketPath, method: 'DELETE', route: tunnelRoute(id) }, BridgeRemoveResponse);
}
