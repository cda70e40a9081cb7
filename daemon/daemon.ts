import Fastify, { type FastifyInstance } from 'fastify';
import { SandboxdError } from '../shared/errors.js';
import { BODY_LIMIT_BYTES, PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';
import type { Platform, SandboxdPaths } from '../shared/paths.js';
import { AgentBridges } from './agent-bridges.js';
import type { Bridges } from './bridges/bridges.js';
import { installErrorHandlers } from './http/errors.js';
import type { Logger } from './logger.js';
import { inspectAgentSocket } from './plan/agent-socket.js';
import { createGitFactsCache } from './plan/git-host.js';
import type { SshDeps } from './plan/ssh.js';
import { discoverConnection, type DiscoverInput } from './podman/discover.js';
import { createDiscoveryCache } from './podman/discovery-cache.js';
import type { ProcessProbe } from './process-identity.js';
import { registerSessionRoutes } from './routes/sessions.js';
import { registerStatusRoutes } from './routes/status.js';
import { registerTunnelRoutes } from './routes/tunnels.js';
import { SessionRegistry, type Clock } from './session-registry.js';
import { SessionService } from './session-service.js';
import type { TunnelRecord } from './tunnels/tunnel.js';

export interface DaemonSettings {
  leaseTtlMs: number;
  sweepIntervalMs: number;
  bridgeIdleMs: number;
  maxSessions: number;
}

export const DEFAULT_SETTINGS: DaemonSettings = {
  leaseTtlMs: 30_000,
  // A dead client is reaped within this interval (the issue allows 10 s).
  sweepIntervalMs: 2_000,
  bridgeIdleMs: 60_000,
  maxSessions: 1024,
};

export interface DaemonDeps {
  platform: Platform;
  paths: SandboxdPaths;
  hostHome: string;
  clock: Clock;
  probe: ProcessProbe;
  logger: Logger;
  logPath: string | null;
  settings: DaemonSettings;
  uid: number;
  requestShutdown(reason: string): void;
  /** Persists a tunnel's running ssh (the state file); null once it stopped. */
  onTunnelChild(id: string, record: TunnelRecord | null): void;
}

export interface Daemon {
  app: FastifyInstance;
  registry: SessionRegistry;
  bridges: Bridges;
  /** Starts the lease sweeper. */
  start(): void;
  /** Stops accepting, ends every session and halts every bridge. */
  close(): Promise<void>;
}

/** Wires the daemon from injected edges (STYLE 4); `runDaemon` supplies the real ones. */
export function createDaemon(deps: DaemonDeps): Daemon {
  const { logger, settings } = deps;
  const discovery = createDiscoveryCache(discoverConnection, { home: deps.hostHome, now: () => deps.clock.now() });
  const gitFacts = createGitFactsCache(() => deps.clock.now());
  const agentBridges = new AgentBridges({
    platform: deps.platform,
    paths: deps.paths,
    uid: deps.uid,
    idleMs: settings.bridgeIdleMs,
    logger,
    discover: async (input) => {
      const view: DiscoverInput = { path: input.client.path ?? '', env: input.client.env ?? {}, requested: input.connection };
      return {
        connection: await discovery.get(view),
        forget: () => {
          discovery.forget(view);
        },
      };
    },
    onTunnelChild: (id, record) => {
      deps.onTunnelChild(id, record);
    },
  });
  const bridges = agentBridges.all;
  const registry = new SessionRegistry({
    clock: deps.clock,
    probe: deps.probe,
    leaseTtlMs: settings.leaseTtlMs,
    maxSessions: settings.maxSessions,
    logger,
  });
  const ssh: SshDeps = {
    inspect: inspectAgentSocket,
    serve: (agentSocket, input) => agentBridges.serve(agentSocket, input),
  };
  const service = new SessionService({
    platform: deps.platform,
    hostHome: deps.hostHome,
    clock: deps.clock,
    probe: deps.probe,
    registry,
    ssh,
    gitFacts: (input) => gitFacts.get(input),
    emptyDir: deps.paths.emptyDir,
    leaseTtlMs: settings.leaseTtlMs,
  });

  let closing = false;
  // fastify's own 503-on-close reply has neither our error shape nor the protocol header.
  const app = Fastify({ logger: false, bodyLimit: BODY_LIMIT_BYTES, return503OnClosing: false });
  app.addHook('onRequest', (_request, _reply, done) => {
    done(closing ? new SandboxdError('SHUTTING_DOWN', 'the daemon is shutting down') : undefined);
  });
  // JSON only: anything else is UNSUPPORTED_MEDIA_TYPE rather than a string for the schemas.
  app.removeContentTypeParser('text/plain');
  app.addHook('onSend', async (_request, reply) => {
    void reply.header(PROTOCOL_HEADER, String(PROTOCOL_VERSION));
  });
  installErrorHandlers(app, logger);
  registerStatusRoutes(app, {
    platform: deps.platform,
    socketPath: deps.paths.socketPath,
    logPath: deps.logPath,
    startedAt: deps.clock.now(),
    now: () => deps.clock.now(),
    registry,
    bridges,
    requestShutdown: (reason) => {
      deps.requestShutdown(reason);
    },
  });
  registerSessionRoutes(app, service, registry);
  registerTunnelRoutes(app, bridges);

  let sweeper: NodeJS.Timeout | null = null;
  let sweeping = false;
  return {
    app,
    registry,
    bridges,
    start() {
      sweeper = setInterval(() => {
        if (sweeping) return;
        sweeping = true;
        registry
          .sweep()
          .catch((error: unknown) => {
            logger.error({ err: error }, 'session sweep failed');
          })
          .finally(() => {
            sweeping = false;
          });
      }, settings.sweepIntervalMs);
      sweeper.unref();
    },
    async close() {
      closing = true;
      if (sweeper !== null) clearInterval(sweeper);
      await app.close();
      registry.endAll('shutdown');
      await bridges.closeAll();
    },
  };
}
