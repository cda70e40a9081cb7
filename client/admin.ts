import type { BridgeInfo } from '../shared/contracts/bridges.js';
import type { SessionInfo } from '../shared/contracts/sessions.js';
import { SESSIONS_ROUTE, sessionRemoveRoute } from '../shared/contracts/session-routes.js';
import { clientPaths } from './connection.js';
import { request } from './transport.js';

/*
 * The answers' schemas (and zod with them) load once a request is written: `sandboxd run` imports
 * this module for its container's removal, which most runs never call.
 */
const sessions = () => import('../shared/contracts/sessions.js');
const bridges = () => import('../shared/contracts/bridges.js');

/** Read-only and admin calls on sessions and tunnels; none of them starts a daemon. */

export async function listSessions(env: NodeJS.ProcessEnv = process.env): Promise<SessionInfo[]> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'GET', route: SESSIONS_ROUTE }, async () => (await sessions()).SessionListResponse)).sessions;
}

/**
 * Ends a session and stops and removes its container (what the daemon does when the client dies);
 * resolves to the ids removed. The engine gets up to 25 s (`ps`, then `rm -f`).
 */
export async function removeSession(id: string, env: NodeJS.ProcessEnv = process.env): Promise<string[]> {
  const { socketPath } = clientPaths(env);
  return (await request({ socketPath, method: 'DELETE', route: sessionRemoveRoute(id), timeoutMs: 30_000 }, async () => (await sessions()).SessionRemoveResponse)).containers;
}

export async function listTunnels(env: NodeJS.ProcessEnv = process.env): Promise<BridgeInfo[]> {
  const { socketPath } = clientPaths(env);
  const { TUNNELS_ROUTE, BridgeListResponse } = await bridges();
  return (await request({ socketPath, method: 'GET', route: TUNNELS_ROUTE }, BridgeListResponse)).tunnels;
}

export async function restartTunnel(id: string, env: NodeJS.ProcessEnv = process.env): Promise<BridgeInfo> {
  const { socketPath } = clientPaths(env);
  const { tunnelRestartRoute, BridgeResponse } = await bridges();
  return (await request({ socketPath, method: 'POST', route: tunnelRestartRoute(id), timeoutMs: 30_000 }, BridgeResponse)).tunnel;
}

export async function removeTunnel(id: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const { socketPath } = clientPaths(env);
  const { tunnelRoute, BridgeRemoveResponse } = await bridges();
  await request({ socketPath, method: 'DELETE', route: tunnelRoute(id) }, BridgeRemoveResponse);
}
