import type { FastifyInstance } from 'fastify';
import { BridgeParams, TUNNELS_ROUTE, type BridgeInfo, type BridgeListResponse } from '../../shared/contracts/bridges.js';
import { SandboxdError } from '../../shared/errors.js';
import type { Bridges } from '../bridges/bridges.js';
import { parseInput } from '../http/errors.js';

function notFound(id: string): SandboxdError {
  return new SandboxdError('TUNNEL_NOT_FOUND', `no tunnel ${id}`);
}

/** `refresh` brings counts kept outside the daemon (relay containers') up to date before a list. */
export function registerTunnelRoutes(app: FastifyInstance, bridges: Bridges, refresh: () => Promise<void>): void {
  app.get(TUNNELS_ROUTE, async (): Promise<BridgeListResponse> => {
    await refresh();
    return { tunnels: bridges.list() };
  });

  app.post(`${TUNNELS_ROUTE}/:id/restart`, async (request): Promise<{ tunnel: BridgeInfo }> => {
    const { id } = parseInput(BridgeParams, request.params, 'tunnel id');
    const tunnel = await bridges.restart(id);
    if (tunnel === null) throw notFound(id);
    return { tunnel };
  });

  app.delete(`${TUNNELS_ROUTE}/:id`, async (request): Promise<{ removed: true }> => {
    const { id } = parseInput(BridgeParams, request.params, 'tunnel id');
    if (!(await bridges.remove(id))) throw notFound(id);
    return { removed: true };
  });
}
