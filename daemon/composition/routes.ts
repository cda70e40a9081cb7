import type { FastifyInstance } from 'fastify';
import { registerSessionRoutes } from '../routes/sessions.js';
import { registerStatusRoutes } from '../routes/status.js';
import { registerTunnelRoutes } from '../routes/tunnels.js';
import { registerPurgeRoute } from '../routes/purge.js';
import type { PurgeRequest, PurgeResponse } from '../../shared/contracts/purge.js';
import type { DaemonDeps } from './daemon-deps.js';
import type { Services } from './services.js';

/**
 * Every /v1 route onto its service; `drain` has this daemon stop once its last session ends,
 * `purge` removes everything of its own before it stops.
 */
export function registerRoutes(app: FastifyInstance, deps: DaemonDeps, services: Services, drain: () => number, purge: (request: PurgeRequest) => Promise<PurgeResponse>): void {
  const { clock } = deps.edges;
  const { registry, agentBridges } = services;
  // Uptime counts on the monotonic clock from a start shown in wall time.
  const startedAt = clock.now();
  const startedMonotonic = clock.monotonic();
  registerStatusRoutes(app, {
    platform: deps.platform,
    socketPath: deps.paths.socketPath,
    logPath: deps.logPath,
    startedAt,
    now: () => startedAt + clock.monotonic() - startedMonotonic,
    registry,
    bridges: agentBridges.all,
    engines: () => services.engines.list(),
    requestShutdown: (reason) => {
      deps.requestShutdown(reason);
    },
    ...services.privacy,
    drain,
  });
  // What relays in engines' VMs counted is read when someone lists, never on a timer.
  const counted = () => agentBridges.refresh();
  registerSessionRoutes(app, services.sessions, registry, services.containers, services.gitSync, counted);
  registerTunnelRoutes(app, agentBridges.all, counted);
  registerPurgeRoute(app, {
    purge,
    requestShutdown: (reason) => {
      deps.requestShutdown(reason);
    },
  });
}
