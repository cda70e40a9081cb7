import type { FastifyInstance } from 'fastify';
import {
  AcquireRequest,
  SESSIONS_ROUTE,
  SessionParams,
  type AcquireResponse,
  type HeartbeatResponse,
  type ReleaseResponse,
  type SessionListResponse,
} from '../../shared/contracts/sessions.js';
import { parseInput } from '../http/validate.js';
import type { SessionRegistry } from '../session-registry.js';
import type { SessionService } from '../session-service.js';

export function registerSessionRoutes(app: FastifyInstance, service: SessionService, registry: SessionRegistry): void {
  app.post(SESSIONS_ROUTE, async (request, reply): Promise<AcquireResponse> => {
    const input = parseInput(AcquireRequest, request.body, 'session request');
    const result = await service.acquire(input);
    void reply.status(201);
    return result;
  });

  app.get(SESSIONS_ROUTE, (): SessionListResponse => ({ sessions: registry.list() }));

  app.post(`${SESSIONS_ROUTE}/:id/heartbeat`, (request): HeartbeatResponse => {
    const { id } = parseInput(SessionParams, request.params, 'session id');
    return { session: registry.heartbeat(id) };
  });

  app.delete(`${SESSIONS_ROUTE}/:id`, (request): ReleaseResponse => {
    const { id } = parseInput(SessionParams, request.params, 'session id');
    return { released: registry.end(id, 'released') };
  });
}
