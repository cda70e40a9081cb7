import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { BODY_LIMIT_BYTES, PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';
import type { Platform, SandboxdPaths } from '../shared/paths.js';
import { AgentRelay } from './bridges/agent-relay.js';
import { BridgePool } from './bridges/bridge-pool.js';
import { installErrorHandlers } from './http/errors.js';
import { stableHash } from './ids.js';
import type { Logger } from './logger.js';
import { inspectAgentSocket } from './plan/agent-socket.js';
import { relabelFor } from './plan/flatten.js';
import { findHomeGitFiles } from './plan/git-files.js';
import type { ServedAgent, SshDeps } from './plan/ssh.js';
import type { ProcessProbe } from './process-identity.js';
import { registerSessionRoutes } from './routes/sessions.js';
import { registerStatusRoutes } from './routes/status.js';
import { registerTunnelRoutes } from './routes/tunnels.js';
import { SessionRegistry, type Clock } from './session-registry.js';
import { SessionService } from './session-service.js';

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
  requestShutdown(reason: string): void;
}

export interface Daemon {
  app: FastifyInstance;
  registry: SessionRegistry;
  pool: BridgePool;
  /** Starts the lease sweeper. */
  start(): void;
  /** Stops accepting, ends every session and halts every bridge. */
  close(): Promise<void>;
}

/** Wires the daemon from injected edges (STYLE 4); `runDaemon` supplies the real ones. */
export function createDaemon(deps: DaemonDeps): Daemon {
  const { logger, settings } = deps;
  const pool = new BridgePool({ idleMs: settings.bridgeIdleMs, logger: logger.child({ module: 'pool' }) });
  const registry = new SessionRegistry({
    clock: deps.clock,
    probe: deps.probe,
    leaseTtlMs: settings.leaseTtlMs,
    maxSessions: settings.maxSessions,
    logger,
  });

  const serveByRelay = async (agentSocket: string, engine: 'docker' | 'podman'): Promise<ServedAgent> => {
    const hash = stableHash(agentSocket);
    const dir = path.join(deps.paths.agentsDir, hash);
    const lease = await pool.acquire(`relay:${agentSocket}`, () => new AgentRelay({ id: `relay_${hash}`, agentSocket, dir, logger }));
    return { lease, kind: 'mount', mountSource: dir, relabel: relabelFor(engine, deps.platform), flags: [], warnings: [] };
  };
  const ssh: SshDeps = {
    inspect: inspectAgentSocket,
    serve: (agentSocket, input) => serveByRelay(agentSocket, input.engine),
  };
  const service = new SessionService({
    platform: deps.platform,
    hostHome: deps.hostHome,
    clock: deps.clock,
    probe: deps.probe,
    registry,
    ssh,
    findGitFiles: findHomeGitFiles,
    leaseTtlMs: settings.leaseTtlMs,
  });

  const app = Fastify({ logger: false, bodyLimit: BODY_LIMIT_BYTES, return503OnClosing: true });
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
    pool,
    requestShutdown: (reason) => {
      deps.requestShutdown(reason);
    },
  });
  registerSessionRoutes(app, service, registry);
  registerTunnelRoutes(app, pool);

  let sweeper: NodeJS.Timeout | null = null;
  let sweeping = false;
  return {
    app,
    registry,
    pool,
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
      if (sweeper !== null) clearInterval(sweeper);
      await app.close();
      registry.endAll('shutdown');
      await pool.closeAll();
    },
  };
}
