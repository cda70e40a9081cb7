import type { FastifyInstance } from 'fastify';
import { PURGE_ROUTE, PurgeRequest, type PurgeResponse } from '../../shared/contracts/purge.js';
import { parseInput } from '../http/errors.js';

export interface PurgeRouteDeps {
  purge(request: PurgeRequest): Promise<PurgeResponse>;
  requestShutdown(reason: string): void;
}

export function registerPurgeRoute(app: FastifyInstance, deps: PurgeRouteDeps): void {
  app.post(PURGE_ROUTE, async (request, reply): Promise<PurgeResponse> => {
    const input = parseInput(PurgeRequest, request.body ?? {}, 'purge request');
    const purged = await deps.purge(input);
    // Nothing of the daemon's is left to serve: it stops once the answer is out.
    reply.raw.once('finish', () => {
      deps.requestShutdown('purged');
    });
    return purged;
  });
}
