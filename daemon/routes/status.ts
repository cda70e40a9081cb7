import type { FastifyInstance } from 'fastify';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { DRAIN_ROUTE, READABLE_ROUTE, ReadableRequest, SHUTDOWN_ROUTE, STATUS_ROUTE, type DrainResponse, type EngineStatus, type ReadableResponse, type ShutdownResponse, type StatusResponse } from '../../shared/contracts/status.js';
import type { Platform } from '../../shared/paths.js';
import type { Bridges } from '../bridges/bridges.js';
import { parseInput } from '../http/errors.js';
import type { PrivacyPrincipal } from '../os/privacy.js';
import type { SessionRegistry } from '../sessions/session-registry.js';
import { VERSION } from '../os/package-files.js';

export interface StatusDeps {
  platform: Platform;
  socketPath: string;
  logPath: string | null;
  startedAt: number;
  now(): number;
  registry: SessionRegistry;
  bridges: Bridges;
  /** Each Docker engine sessions used: its kind, bridge and agent probe. */
  engines(): EngineStatus[];
  requestShutdown(reason: string): void;
  /** Stop once the last session ends; answers how many are left (0: stop now). */
  drain(): number;
  principal: PrivacyPrincipal;
  readable(dir: string): Promise<boolean>;
}

export function registerStatusRoutes(app: FastifyInstance, deps: StatusDeps): void {
  app.get(STATUS_ROUTE, (): StatusResponse => ({
    version: VERSION,
    protocol: PROTOCOL_VERSION,
    pid: process.pid,
    startedAt: new Date(deps.startedAt).toISOString(),
    uptimeMs: Math.max(0, Math.round(deps.now() - deps.startedAt)),
    socketPath: deps.socketPath,
    logPath: deps.logPath,
    platform: deps.platform,
    counts: { sessions: deps.registry.size, tunnels: deps.bridges.size },
    engines: deps.engines(),
  }));

  app.post(SHUTDOWN_ROUTE, (_request, reply): ShutdownResponse => {
    // Stop only once the reply is out: the shutdown closes this very connection.
    reply.raw.once('finish', () => {
      deps.requestShutdown('shutdown request');
    });
    void reply.status(202);
    return { stopping: true };
  });

  app.post(READABLE_ROUTE, async (request): Promise<ReadableResponse> => {
    const { path } = parseInput(ReadableRequest, request.body, 'readable check');
    return { readable: await deps.readable(path), principal: deps.principal };
  });

  app.post(DRAIN_ROUTE, (_request, reply): DrainResponse => {
    const sessions = deps.drain();
    if (sessions === 0) {
      reply.raw.once('finish', () => {
        deps.requestShutdown('replaced by a newer sandboxd');
      });
    }
    void reply.status(202);
    return { sessions };
  });
}
