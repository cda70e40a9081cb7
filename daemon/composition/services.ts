import path from 'node:path';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import { fingerprintThrough } from '../cache/fingerprint-cache.js';
import { QuietTime } from '../cache/quiet-time.js';
import { DockerEngines } from '../engines/docker-engines.js';
import { GitSync } from '../gitsync/git-sync.js';
import { watchDirectory } from '../os/watch.js';
import { createPrivacyGate, probeReadable, type PrivacyPrincipal } from '../os/privacy.js';
import { inspectAgentSocket } from '../plan/agent-socket.js';
import { GeneratedConfigStore } from '../plan/git/git-config-store.js';
import { createGitFactsCache, sessionGit } from '../plan/git/git-host.js';
import { discoverConnection } from '../podman/discover.js';
import { createDiscoveryCache, perAcquire } from '../podman/discovery-cache.js';
import { createPodmanVersions } from '../podman/podman-version.js';
import type { SessionContainers } from '../sessions/session-containers.js';
import { SessionRegistry } from '../sessions/session-registry.js';
import { SessionService } from '../sessions/session-service.js';
import type { KeptSession } from '../bridges/endpoint-records.js';
import { userEngine } from '../sessions/user-engine.js';
import { AgentBridges } from './agent-bridges.js';
import { CredentialServer, fillContext } from '../credentials/credential-server.js';
import { hostFill } from '../credentials/host-fill.js';
import { TrackedWork } from './background.js';
import { createSessionContainers } from './containers.js';
import type { DaemonDeps } from './daemon-deps.js';
import { createContainerSites } from './podman-site.js';

/** Every service of the daemon, built once from its deps' edges. */
export interface Services {
  /** Refreshes of old answers (git, podman, docker) wait for a moment without requests. */
  quiet: QuietTime;
  engines: DockerEngines;
  agentBridges: AgentBridges;
  containers: SessionContainers;
  /** The sandboxes' own git dirs, and their work brought home. */
  gitSync: GitSync;
  registry: SessionRegistry;
  sessions: SessionService;
  /** Container work a session's end or start time set off: a graceful close waits for it. */
  work: TrackedWork;
  privacy: { principal: PrivacyPrincipal; readable: (dir: string) => Promise<boolean> };
  /** Answers the sandboxes' git credential requests (`get` only) from the user's host git. */
  credentials: CredentialServer;
}

type Caches = ReturnType<typeof buildCaches>;

/** Answers that cost a spawn, kept while their files are unchanged; every age is monotonic (clock.ts). */
function buildCaches(deps: DaemonDeps, quiet: QuietTime) {
  const { edges, hostHome: home } = deps;
  const now = (): number => edges.clock.monotonic();
  return {
    discovery: perAcquire(createDiscoveryCache((input) => discoverConnection(input, { home, run: edges.run }), { home, now, defer: quiet.later })),
    gitFacts: createGitFactsCache(now, sessionGit(deps.platform, edges.run), quiet.later, fingerprintThrough(edges.looks)),
    engines: new DockerEngines({ run: edges.run, platform: deps.platform, home, clock: edges.clock, defer: quiet.later }),
    podmanVersions: createPodmanVersions({ run: edges.run, home, now, defer: quiet.later }),
  };
}

function buildAgentBridges(deps: DaemonDeps, caches: Caches, liveSessions: () => KeptSession[], credentials: CredentialServer): AgentBridges {
  const { discovery } = caches;
  return new AgentBridges({
    credentialSocket: credentials.socketPath,
    answerKept: (endpoint, sessionId, kept) => credentials.register(endpoint, { sessionId, hosts: kept.hosts, fill: fillContext(deps.hostHome, kept), kept: true }),
    probe: deps.probe,
    liveSessions,
    keptTtlMs: deps.settings.leaseTtlMs,
    engines: caches.engines,
    platform: deps.platform,
    paths: deps.paths,
    idleMs: deps.settings.bridgeIdleMs,
    logger: deps.logger,
    uid: deps.uid,
    edges: deps.edges,
    discover: async (input: AcquireInput) => ({
      connection: await discovery.connectionFor(input),
      forget: () => {
        discovery.forget(input);
      },
    }),
    onTunnelChild: (id, record) => {
      deps.onTunnelChild(id, record);
    },
  });
}

function buildGitSync(deps: DaemonDeps, endSessions: (ids: readonly string[], why: string) => void): GitSync {
  return new GitSync({
    stateDir: deps.paths.stateDir,
    emptyDir: deps.paths.emptyDir,
    logger: deps.logger,
    run: deps.edges.run,
    timers: deps.edges.timers,
    monotonic: () => deps.edges.clock.monotonic(),
    platform: deps.platform,
    watch: watchDirectory,
    endSessions,
    // A restarted daemon's clients renew within a lease; two leave room for a slow one.
    orphanMs: 2 * deps.settings.leaseTtlMs,
    looks: deps.edges.looks,
  });
}

/**
 * The registry with what a session's end and start set off: its sandbox's last git sync, its
 * container removed or its record completed. `onEmpty` hears when the last session has ended.
 */
function buildRegistry(deps: DaemonDeps, parts: { gitSync: GitSync; containers: SessionContainers; agentBridges: AgentBridges; work: TrackedWork; onEmpty: () => void }): SessionRegistry {
  const { logger, settings } = deps;
  const { gitSync, containers, agentBridges, work } = parts;
  const registry: SessionRegistry = new SessionRegistry({
    clock: deps.edges.clock,
    probe: deps.probe,
    leaseTtlMs: settings.leaseTtlMs,
    sweepIntervalMs: settings.sweepIntervalMs,
    maxSessions: settings.maxSessions,
    logger,
    onAdd: () => {
      agentBridges.changed();
    },
    onEnd: (info, reason) => {
      agentBridges.changed();
      gitSync.release(info.id);
      const ended = containers.ended(info.id, reason);
      work.track(ended, (error) => {
        logger.error({ err: error, sessionId: info.id }, 'cannot remove the container of a session that ended');
      });
      if (registry.size === 0) parts.onEmpty();
      // Listed until its container is gone; a released one's container is the client's.
      return reason === 'released' || reason === 'shutdown' ? undefined : ended;
    },
    onStartTime: (info, startTime) => {
      work.track(containers.started(info.id, startTime), (error) => {
        logger.error({ err: error, sessionId: info.id }, "cannot record the client's start time with its container");
      });
    },
  });
  return registry;
}

/** Builds every service, top to bottom; `onEmpty` hears when the last session has ended. */
export function buildServices(deps: DaemonDeps, onEmpty: () => void): Services {
  const { edges, logger, settings } = deps;
  const quiet = new QuietTime(() => edges.clock.monotonic(), edges.timers);
  const caches = buildCaches(deps, quiet);
  const credentials = new CredentialServer({
    socketPath: path.join(deps.paths.runtimeDir, 'git-credential.sock'),
    fill: (context, query) => hostFill(edges.run, context, query),
    monotonic: () => edges.clock.monotonic(),
    logger,
  });
  const agentBridges = buildAgentBridges(deps, caches, () => registry.keptSessions(), credentials);
  const work = new TrackedWork();
  const containers = createSessionContainers({
    paths: deps.paths,
    uid: deps.uid,
    hostHome: deps.hostHome,
    probe: deps.probe,
    clock: edges.clock,
    run: edges.run,
    leaseTtlMs: settings.leaseTtlMs,
    logger,
    identity: deps.identity,
    strayAnswers: () => deps.strayAnswers(),
    defer: quiet.later,
    isLive: (id) => registry.has(id),
  });
  const gitSync = buildGitSync(deps, (ids, why) => {
    logger.error({ module: 'gitsync', sessionIds: ids, why }, 'sessions end: their git work cannot be brought home within its bounds');
    for (const id of ids) registry.end(id, 'git');
  });
  const registry = buildRegistry(deps, { gitSync, containers, agentBridges, work, onEmpty });
  const privacy = { principal: deps.privacy?.principal ?? { binary: process.execPath, started: 'other' as const, app: null }, readable: deps.privacy?.readable ?? probeReadable };
  const gitConfigs = new GeneratedConfigStore(path.join(deps.paths.runtimeDir, 'git'));
  const sessions = new SessionService({
    platform: deps.platform,
    hostHome: deps.hostHome,
    clock: edges.clock,
    probe: deps.probe,
    registry,
    ssh: { inspect: inspectAgentSocket, serve: (agentSocket, input, role, name) => agentBridges.serve(agentSocket, input, role, name) },
    credentials: { socket: credentials.socketPath, hostHome: deps.hostHome, register: (endpoint, session) => credentials.register(endpoint, session) },
    gitFacts: (input) => caches.gitFacts.get(input),
    privacy: createPrivacyGate({ platform: deps.platform, home: deps.hostHome, ...privacy }),
    gitSync,
    writeGitConfig: (content) => gitConfigs.write(content),
    containers,
    site: createContainerSites({
      platform: deps.platform,
      hostHome: deps.hostHome,
      edges,
      tunnels: agentBridges.tunnelIndex,
      discover: (input) => caches.discovery.connectionFor(input),
      logger,
      defer: quiet.later,
    }),
    userEngine: (input) =>
      userEngine(input, {
        platform: deps.platform,
        uid: deps.uid,
        podmanVersion: caches.podmanVersions,
        identifyDocker: (session) => caches.engines.identify(session),
      }),
    hostUser: { uid: deps.uid, gid: deps.gid ?? deps.uid },
    emptyDir: deps.paths.emptyDir,
    leaseTtlMs: settings.leaseTtlMs,
  });
  return { quiet, engines: caches.engines, agentBridges, containers, gitSync, registry, sessions, work, privacy, credentials };
}
