import type { FastifyInstance } from 'fastify';
import type { Bridges } from '../bridges/bridges.js';
import { createHttpServer } from '../http/server.js';
import type { SessionRegistry } from '../sessions/session-registry.js';
import { startSweeps } from './background.js';
import type { DaemonDeps } from './daemon-deps.js';
import { registerRoutes } from './routes.js';
import { purgeAll } from './purge.js';
import { findExecutable } from '../os/executables.js';
import { ownerLabel } from '../os/owner-label.js';
import type { PurgeRequest, PurgeResponse } from '../../shared/contracts/purge.js';
import { buildServices } from './services.js';

export interface Daemon {
  app: FastifyInstance;
  registry: SessionRegistry;
  bridges: Bridges;
  /** Starts the sweeps and the checks a previous daemon's leftovers need. */
  start(): void;
  /** Stops accepting, ends every session and halts every bridge. */
  close(): Promise<void>;
}

/** Builds the daemon from injected edges (STYLE 4, 10); `runDaemon` supplies the real ones. */
export function createDaemon(deps: DaemonDeps): Daemon {
  const { logger, settings, edges } = deps;
  /** A newer client asked this daemon to make way once its last session ends. */
  let draining = false;
  let closing = false;
  const services = buildServices(deps, () => {
    if (draining && !closing) deps.requestShutdown('the last session ended; a newer sandboxd takes over');
  });
  const { registry, agentBridges, gitSync, quiet, work } = services;
  const app = createHttpServer({
    requestTimeoutMs: settings.requestTimeoutMs,
    maxConnections: settings.maxConnections,
    logger,
    onRequest: () => {
      quiet.touch();
    },
    isClosing: () => closing,
  });
  const drain = (): number => {
    draining = true;
    logger.info({ sessions: registry.size }, 'a newer client asked this daemon to make way; it stops once its last session ends');
    return registry.size;
  };
  const purge = (request: PurgeRequest): Promise<PurgeResponse> => {
    // No session starts while everything of the daemon's is being removed; the purge ends in a stop.
    closing = true;
    const engineCli = { home: deps.hostHome, run: edges.run, findExecutable };
    return purgeAll(request, { registry, containers: services.containers, bridges: agentBridges, work, owner: ownerLabel(deps.uid, deps.paths.stateDir), engineCli, logger });
  };
  registerRoutes(app, deps, services, drain, purge);
  let stopSweeps = (): void => undefined;
  return {
    app,
    registry,
    bridges: agentBridges.all,
    start() {
      // At once: the containers of sessions a killed daemon left, whose clients are gone, its
      // helpers, and the sandbox git dirs their sessions may still write.
      const sweeps = {
        containers: () => services.containers.sweep(),
        sessions: async () => {
          await registry.sweep();
          await agentBridges.sweepKept();
          await gitSync.poll();
        },
        bridges: () => agentBridges.all.check(),
      };
      stopSweeps = startSweeps(sweeps, settings.sweepIntervalMs, edges.timers, logger);
      edges.looks.listen((event) => {
        if (event.kind === 'online') logger.info({ module: 'looks' }, 'file looks run on the look worker');
        else if (event.kind === 'gone') logger.warn({ module: 'looks', reason: event.reason }, 'the look worker ended; its looks run on the main thread until another one is ready');
        else logger.warn({ module: 'looks' }, 'the look worker keeps failing; file looks run on the main thread');
      });
      // Booted at the first quiet moment, so the first acquire in a repository after it finds it
      // ready: booting a thread (a JavaScript engine of its own) beside the start's first plan
      // would slow the plan an auto-starting client waits for. Looks before then, or a request
      // that comes first, run on the main thread as they would without it.
      quiet.later(() => {
        if (!closing) edges.looks.start();
      });
      agentBridges.start();
      work.track(services.credentials.listen(), (error) => {
        logger.error({ module: 'git-credential', err: error }, 'cannot listen for the sandboxes\' credential requests');
      });
      work.track(gitSync.start(), (error) => {
        logger.error({ module: 'gitsync', err: error }, "cannot look at the sandbox git dirs a previous daemon kept");
      });
    },
    async close() {
      closing = true;
      quiet.stop();
      stopSweeps();
      await app.close();
      // The sessions' sockets are recorded and kept in place for the next daemon before they end.
      await agentBridges.suspend();
      registry.endAll('shutdown');
      await Promise.all([agentBridges.all.closeAll(), gitSync.close(), services.credentials.close()]);
      // A removal or record write under way finishes, so the next daemon finds what it left.
      await work.settled();
      await edges.looks.close();
    },
  };
}
