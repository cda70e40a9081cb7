import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Platform, SandboxdPaths } from '../../shared/paths.js';
import { AgentBridges } from './agent-bridges.js';
import { createHttpServer } from '../http/server.js';
import type { SshDeps } from '../plan/host-sockets.js';
import { createSessionContainers } from './containers.js';
import { GeneratedConfigStore } from '../plan/git/git-config-store.js';
import type { Bridges } from '../bridges/bridges.js';
import type { Logger } from '../os/logger.js';
import { inspectAgentSocket } from '../plan/agent-socket.js';
import { createGitFactsCache, sessionGitChooser } from '../plan/git/git-host.js';
import { watchDirectory } from '../guard/fs-edge.js';
import { fileGuardStore } from '../guard/guard-store.js';
import { RepoGuards } from '../guard/repo-guards.js';
import { DockerEngines } from '../engines/docker-engines.js';
import { runSubprocess } from '../os/subprocess.js';
import { discoverConnection } from '../podman/discover.js';
import { createDiscoveryCache, perAcquire } from '../podman/discovery-cache.js';
import { QuietTime } from '../cache/quiet-time.js';
import { createContainerSites } from './podman-site.js';
import { createPrivacyGate, probeReadable, type PrivacyPrincipal } from '../os/privacy.js';
import type { ProcessProbe } from '../os/process-identity.js';
import { registerSessionRoutes } from '../routes/sessions.js';
import { registerStatusRoutes } from '../routes/status.js';
import { registerTunnelRoutes } from '../routes/tunnels.js';
import type { Clock } from '../os/clock.js';
import { SessionRegistry } from '../sessions/session-registry.js';
import { SessionService } from '../sessions/session-service.js';
import type { TunnelRecord } from '../bridges/tunnels/tunnel.js';
import type { DaemonIdentity } from '../containers/container-store.js';

export interface DaemonSettings {
  leaseTtlMs: number;
  sweepIntervalMs: number;
  bridgeIdleMs: number;
  maxSessions: number;
  /** Open connections served at once; null derives it from the soft fd limit. */
  maxConnections: number | null;
  /** A request (headers and body) must arrive within this, or it is answered REQUEST_TIMEOUT. */
  requestTimeoutMs: number;
}

export const DEFAULT_SETTINGS: DaemonSettings = {
  leaseTtlMs: 30_000,
  // A dead client is reaped within this interval (the issue allows 10 s).
  sweepIntervalMs: 2_000,
  bridgeIdleMs: 60_000,
  maxSessions: 1024,
  maxConnections: null,
  requestTimeoutMs: 10_000,
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
  /** This daemon's pid and start time, as its container records name it. */
  identity: DaemonIdentity;
  /** Whether a daemon of an earlier layout answers: what it may own is left alone. */
  strayAnswers(): Promise<boolean>;
  requestShutdown(reason: string): void;
  /** Persists a tunnel's running ssh (the state file); null once it stopped. */
  onTunnelChild(id: string, record: TunnelRecord | null): void;
  /** Who macOS privacy judges (the binary to grant); by default this node, started from a terminal. */
  privacy?: { principal: PrivacyPrincipal; readable?: (dir: string) => Promise<boolean> };
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

/** A periodic job that skips a tick while its previous run is still going; failures are logged. */
function exclusive(job: () => Promise<void>, onError: (error: unknown) => void): () => void {
  let running = false;
  return () => {
    if (running) return;
    running = true;
    job()
      .catch(onError)
      .finally(() => {
        running = false;
      });
  };
}

/** Wires the daemon from injected edges (STYLE 4); `runDaemon` supplies the real ones. */
export function createDaemon(deps: DaemonDeps): Daemon {
  const { logger, settings } = deps;
  // Every age that decides (caches here, leases in the registry) is monotonic (clock.ts).
  const monotonic = (): number => deps.clock.monotonic();
  // Refreshes of old answers (git, podman, docker) wait for a moment without requests. Its timers
  // are real, so it reads the real monotonic clock rather than the injected one.
  const quiet = new QuietTime(() => performance.now());
  const discovery = perAcquire(
    createDiscoveryCache((input) => discoverConnection(input, { home: deps.hostHome }), { home: deps.hostHome, now: monotonic, defer: quiet.later }),
  );
  const gitFacts = createGitFactsCache(monotonic, sessionGitChooser(deps.platform), quiet.later);
  const gitConfigs = new GeneratedConfigStore(path.join(deps.paths.runtimeDir, 'git'));
  const engines = new DockerEngines({ run: runSubprocess, platform: deps.platform, home: deps.hostHome, clock: deps.clock, defer: quiet.later });
  const agentBridges = new AgentBridges({
    engines,
    platform: deps.platform,
    paths: deps.paths,
    idleMs: settings.bridgeIdleMs,
    logger,
    uid: deps.uid,
    discover: async (input) => ({
      connection: await discovery.connectionFor(input),
      forget: () => {
        discovery.forget(input);
      },
    }),
    onTunnelChild: (id, record) => {
      deps.onTunnelChild(id, record);
    },
  });
  const bridges = agentBridges.all;
  const containers = createSessionContainers({
    paths: deps.paths,
    uid: deps.uid,
    hostHome: deps.hostHome,
    probe: deps.probe,
    clock: deps.clock,
    leaseTtlMs: settings.leaseTtlMs,
    logger,
    identity: deps.identity,
    strayAnswers: () => deps.strayAnswers(),
    defer: quiet.later,
    isLive: (id) => registry.has(id),
  });
  /** A newer client asked this daemon to make way once its last session ends. */
  let draining = false;
  /** Container work a session's end or start time set off: a graceful close waits for it. */
  const containerWork = new Set<Promise<void>>();
  const track = (work: Promise<void>): void => {
    containerWork.add(work);
    void work.finally(() => containerWork.delete(work));
  };
  const guards = new RepoGuards({
    // File ctimes, which the guard compares with when it began, are wall-clock.
    now: () => Date.now(),
    logger,
    store: fileGuardStore(deps.paths.stateDir, logger),
    endSessions: (sessionIds) => {
      for (const id of sessionIds) registry.end(id, 'guard');
    },
    idleMs: settings.bridgeIdleMs,
    watch: watchDirectory,
    // Its re-checks wait on real timers, so it reads the real monotonic clock (as the quiet time does).
    monotonic: () => performance.now(),
    after: (ms, work) => {
      const timer = setTimeout(work, ms);
      timer.unref();
      return () => {
        clearTimeout(timer);
      };
    },
  });
  const registry = new SessionRegistry({
    clock: deps.clock,
    probe: deps.probe,
    leaseTtlMs: settings.leaseTtlMs,
    sweepIntervalMs: settings.sweepIntervalMs,
    maxSessions: settings.maxSessions,
    logger,
    onEnd: (info, reason) => {
      guards.release(info.id);
      track(
        containers.ended(info.id, reason).then(
          () => undefined,
          (error: unknown) => {
            logger.error({ err: error, sessionId: info.id }, 'cannot remove the container of a session that ended');
          },
        ),
      );
      if (draining && !closing && registry.size === 0) deps.requestShutdown('the last session ended; a newer sandboxd takes over');
    },
    onStartTime: (info, startTime) => {
      track(
        containers.started(info.id, startTime).catch((error: unknown) => {
          logger.error({ err: error, sessionId: info.id }, "cannot record the client's start time with its container");
        }),
      );
    },
  });
  const ssh: SshDeps = {
    inspect: inspectAgentSocket,
    serve: (agentSocket, input, role) => agentBridges.serve(agentSocket, input, role),
  };
  const principal = deps.privacy?.principal ?? { binary: process.execPath, launchd: false };
  const readable = deps.privacy?.readable ?? probeReadable;
  const service = new SessionService({
    platform: deps.platform,
    hostHome: deps.hostHome,
    clock: deps.clock,
    probe: deps.probe,
    registry,
    ssh,
    gitFacts: (input) => gitFacts.get(input),
    privacy: createPrivacyGate({ platform: deps.platform, home: deps.hostHome, principal, readable }),
    guard: guards,
    writeGitConfig: (content) => gitConfigs.write(content),
    containers,
    site: createContainerSites({
      platform: deps.platform,
      hostHome: deps.hostHome,
      stateDir: deps.paths.stateDir,
      tunnels: agentBridges.tunnelIndex,
      discover: (input) => discovery.connectionFor(input),
      logger,
      now: monotonic,
      defer: quiet.later,
    }),
    emptyDir: deps.paths.emptyDir,
    leaseTtlMs: settings.leaseTtlMs,
  });

  let closing = false;
  const app = createHttpServer({
    requestTimeoutMs: settings.requestTimeoutMs,
    maxConnections: settings.maxConnections,
    logger,
    onRequest: () => {
      quiet.touch();
    },
    isClosing: () => closing,
  });
  // Uptime counts on the monotonic clock from a start shown in wall time.
  const startedAt = deps.clock.now();
  const startedMonotonic = monotonic();
  registerStatusRoutes(app, {
    platform: deps.platform,
    socketPath: deps.paths.socketPath,
    logPath: deps.logPath,
    startedAt,
    now: () => startedAt + monotonic() - startedMonotonic,
    registry,
    bridges,
    engines: () => engines.list(),
    requestShutdown: (reason) => {
      deps.requestShutdown(reason);
    },
    principal,
    readable,
    drain: () => {
      draining = true;
      logger.info({ sessions: registry.size }, 'a newer client asked this daemon to make way; it stops once its last session ends');
      return registry.size;
    },
  });
  registerSessionRoutes(app, service, registry, containers);
  registerTunnelRoutes(app, bridges);

  let sweeper: NodeJS.Timeout | null = null;
  // Separate from the lease sweep: a slow engine must not hold up noticing dead clients.
  const sweepContainers = exclusive(() => containers.sweep(), (error) => {
    logger.error({ err: error }, 'container sweep failed');
  });
  const sweepSessions = exclusive(() => registry.sweep(), (error) => {
    logger.error({ err: error }, 'session sweep failed');
  });
  // Each bridge looks at its socket: one that is not the socket it bound is re-created.
  const checkBridges = exclusive(() => bridges.check(), (error) => {
    logger.error({ err: error }, 'bridge check failed');
  });
  return {
    app,
    registry,
    bridges,
    start() {
      // At once: the containers of sessions a killed daemon left, whose clients are gone, its
      // helpers, and the repositories their sandboxes could write.
      sweepContainers();
      agentBridges.start();
      track(
        guards.start().catch((error: unknown) => {
          logger.error({ module: 'guard', err: error }, 'cannot check the repositories a previous daemon guarded');
        }),
      );
      sweeper = setInterval(() => {
        sweepContainers();
        sweepSessions();
        checkBridges();
      }, settings.sweepIntervalMs);
      sweeper.unref();
    },
    async close() {
      closing = true;
      quiet.stop();
      if (sweeper !== null) clearInterval(sweeper);
      await app.close();
      registry.endAll('shutdown');
      await Promise.all([bridges.closeAll(), guards.close()]);
      // A removal or record write under way finishes, so the next daemon finds what it left.
      await Promise.all(containerWork);
    },
  };
}
