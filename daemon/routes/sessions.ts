import type { FastifyInstance } from 'fastify';
import {
  AcquireRequest,
  HEARTBEATS_ROUTE,
  HeartbeatBatchRequest,
  SESSIONS_ROUTE,
  SessionDeleteQuery,
  SessionParams,
  type AcquireResponse,
  type HeartbeatBatchResponse,
  type HeartbeatResponse,
  type ReleaseResponse,
  type SessionInfo,
  type SessionListResponse,
  type SessionRemoveResponse,
} from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';
import type { SessionContainers } from '../sessions/session-containers.js';
import type { GitSync } from '../gitsync/git-sync.js';
import { parseInput } from '../http/errors.js';
import type { SessionRegistry } from '../sessions/session-registry.js';
import type { SessionService } from '../sessions/session-service.js';

/** `refresh` brings counts kept outside the daemon (relay containers') up to date before a list. */
export function registerSessionRoutes(
  app: FastifyInstance,
  service: SessionService,
  registry: SessionRegistry,
  containers: SessionContainers,
  git: Pick<GitSync, 'status' | 'ended'>,
  refresh: () => Promise<void>,
): void {
  /**
   * The container id is read from its cidfile when asked: the engine writes it after the plan left;
   * what the sandbox's git work left waiting changes with every sync.
   */
  const withContainer = async (info: SessionInfo): Promise<SessionInfo> => ({ ...info, container: await containers.describe(info.id), git: git.status(info.id) ?? info.git });

  app.post(SESSIONS_ROUTE, async (request, reply): Promise<AcquireResponse> => {
    const input = parseInput(AcquireRequest, request.body, 'session request');
    const result = await service.acquire(input);
    void reply.status(201);
    return result;
  });

  app.get(SESSIONS_ROUTE, async (): Promise<SessionListResponse> => {
    await refresh();
    return { sessions: await Promise.all(registry.list().map(withContainer)) };
  });

  app.post(`${SESSIONS_ROUTE}/:id/heartbeat`, async (request): Promise<HeartbeatResponse> => {
    const { id } = parseInput(SessionParams, request.params, 'session id');
    return { session: await withContainer(registry.heartbeat(id)) };
  });

  // A client's batch: no container look-up, nothing but the leases, so a thousand idle sessions cost little.
  app.post(HEARTBEATS_ROUTE, (request): HeartbeatBatchResponse => {
    const { sessions } = parseInput(HeartbeatBatchRequest, request.body, 'heartbeat batch');
    return { unknown: registry.heartbeatAll(sessions) };
  });

  app.delete(`${SESSIONS_ROUTE}/:id`, async (request): Promise<ReleaseResponse | SessionRemoveResponse> => {
    const { id } = parseInput(SessionParams, request.params, 'session id');
    const { remove } = parseInput(SessionDeleteQuery, request.query, 'query');
    if (remove === 'container') {
      // A lease a previous daemon held (its client still alive) can be removed too.
      if (!registry.has(id) && !containers.has(id)) throw new SandboxdError('SESSION_NOT_FOUND', `no session ${id}`);
      // Ending it starts the removal (and keeps it listed until then); this shares that removal.
      registry.end(id, 'removed');
      return { removed: true, containers: await containers.ended(id, 'removed') };
    }
    // The session's last sync runs when it ends: what it left waiting goes back to the client.
    if (registry.end(id, 'released')) return { released: true, git: await git.ended(id) };
    // The client released a lease a previous daemon granted (its container stays the client's), or
    // one the daemon ended: why its git work could not come home goes back to the client.
    await containers.ended(id, 'released');
    return { released: false, git: await git.ended(id) };
  });
}
