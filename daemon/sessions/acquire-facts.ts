import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { AcquireInput, SessionContainer } from '../../shared/contracts/sessions.js';
import type { Mount } from '../../shared/contracts/plan.js';
import type { Platform } from '../../shared/paths.js';
import type { PrivacyGate } from '../os/privacy.js';
import type { ProcessProbe } from '../os/process-identity.js';
import type { ContainerSite } from '../podman/engine-site.js';
import { engineEnv } from '../containers/engine-cli.js';
import { cloudCredentialMounts } from '../plan/extras.js';
import { relabelFor } from '../plan/flatten.js';
import type { GitHostFacts, GitHostInput } from '../plan/git/git-host.js';
import type { UserMappingEngine } from '../plan/user-namespace.js';
import type { SshDeps } from '../plan/host-sockets.js';
import type { CredentialDeps } from '../plan/git-credentials.js';
import { canonicalIfExists, resolveMountSpecs } from '../plan/mount-spec.js';
import { planSsh, type SshSection } from '../plan/ssh.js';
import { settleAll, type DisposalStack } from './disposal-stack.js';
import type { SessionContainers } from './session-containers.js';

const ROOT_USER = { uid: 0, gid: 0, home: '/root' } as const;

/** What gathering an acquire's facts takes (SessionServiceDeps carries all of it). */
export interface AcquireFactsDeps {
  platform: Platform;
  hostHome: string;
  probe: ProcessProbe;
  ssh: SshDeps;
  /** The daemon's git credential server, for sessions that name hosts (none: they are told it is not served). */
  credentials?: CredentialDeps;
  gitFacts(input: GitHostInput): Promise<GitHostFacts>;
  /** Refuses a workdir macOS privacy keeps the daemon from reading, before anything reads it. */
  privacy: PrivacyGate;
  /** Labels the session's container and names its cidfile; removes it when the session dies. */
  containers: Pick<SessionContainers, 'prepare' | 'abandon'>;
  /** Where the session's containers run (a Podman connection's VM, or here) and what it sees. */
  site(input: AcquireInput): Promise<ContainerSite>;
  /** How the session's engine maps container uids onto host users (user-engine.ts). */
  userEngine(input: AcquireInput): Promise<UserMappingEngine>;
}

/** The `run` flags and description of the container the session's record names. */
export interface PreparedContainer {
  flags: string[];
  container: SessionContainer;
}

/** The request, checked: nothing past this point reads a path the request named unchecked. */
export interface CheckedRequest {
  /** The client's cwd, canonical, and one macOS privacy lets the daemon read. */
  cwd: string;
  /** The container user's HOME, when known (root's is). */
  containerHome: string | null;
  relabel: Mount['relabel'];
  /** The extra mounts the request names, resolved. */
  requested: Mount[];
}

/** Everything an acquire reads before it assembles the plan. */
export interface AcquireFacts<Held = unknown> extends CheckedRequest {
  /** The client's start time; null where reading it costs a subprocess (the registry's sweep reads it). */
  startTime: string | null;
  site: ContainerSite;
  /** The agent and host sockets, with the bridge leases that carry them. */
  ssh: SshSection;
  git: GitHostFacts;
  cloud: { mounts: Mount[]; env: Record<string, string> };
  /** Whose files a container user other than root writes on this engine. */
  userEngine: UserMappingEngine;
  /** The container record, still being written while the plan is assembled; awaited before it leaves. */
  container: Promise<PreparedContainer>;
  /** What `holdGit` answered once git's facts were in (the sandbox's git dir, held meanwhile). */
  held: Held;
}

/** Invalid input fails here, before any bridge is held; the privacy gate comes before anything reads the cwd. */
async function checkRequest(input: AcquireInput, deps: AcquireFactsDeps): Promise<CheckedRequest> {
  const cwd = await canonicalIfExists(input.client.cwd);
  if (cwd === null) throw new SandboxdError('BAD_REQUEST', `the client's cwd ${input.client.cwd} does not exist`);
  await deps.privacy.check(cwd);
  const user = input.containerUser ?? ROOT_USER;
  const home = user.home ?? (user.uid === 0 ? ROOT_USER.home : undefined);
  const relabel = relabelFor(input.engine, deps.platform);
  return { cwd, containerHome: home === undefined ? null : path.resolve(home), relabel, requested: await resolveMountSpecs(input.mounts, relabel) };
}

/** Git's facts about the user's config and the repository the workdir is in. */
async function gitFactsOf(input: AcquireInput, cwd: string, deps: AcquireFactsDeps): Promise<{ git: GitHostFacts }> {
  const git = await deps
    .gitFacts({ hostHome: deps.hostHome, cwd, path: input.client.path ?? '', xdgConfigHome: input.client.env?.XDG_CONFIG_HOME })
    .catch((error: unknown) => {
      throw deps.privacy.explain(cwd, error);
    });
  return { git };
}

function releaseLeases(section: SshSection): void {
  for (const lease of section.leases) lease.release();
}

/**
 * Gathers an acquire's facts in parallel: a warm acquire is a few small reads and one connect. The
 * ssh section's bridge leases and the container record are pushed on `undo` as they are taken;
 * everything started is settled before a failure goes on, so `undo` gives back all that was taken.
 */
export async function gatherFacts<Held>(input: AcquireInput, sessionId: string, deps: AcquireFactsDeps, undo: DisposalStack, holdGit: (git: GitHostFacts) => Promise<Held>): Promise<AcquireFacts<Held>> {
  // The client's start time needs only its pid: read while the cwd is resolved. Where it costs a
  // subprocess, the registry's next sweep records it instead, except for a renewal (rare): only
  // the client that held a container may take it over, and that is told by its start time.
  const startTime = deps.probe.cheapStartTime || input.renews !== undefined ? deps.probe.startTime(input.client.pid) : Promise.resolve(null);
  const checked = checkRequest(input, deps);
  // The agent's socket is only looked at (a stat and an identities request): while the request is
  // checked. Nothing is served for it before the check passed.
  const agentCheck = input.sshAgent === 'off' ? undefined : deps.ssh.inspect(input.client.sshAuthSock);
  agentCheck?.catch(() => undefined);
  const ssh = undo.adopt(
    checked.then(() => planSsh(input, deps.ssh, { sessionId, credentials: deps.credentials, agentCheck })),
    releaseLeases,
  );
  const site = checked.then(() => deps.site(input));
  // The record must be on disk before the plan is handed out, not before it is computed: it needs
  // only the site and the start time, so it is written while the git and ssh sections are built,
  // off the warm acquire's critical path. A renewal takes a container over, so it waits for its
  // bridges: one that fails takes nothing. A record is forgotten only once its write is over (one
  // that failed left none), or the write would bring it back.
  const container = undo.adopt(
    Promise.all([site, startTime, input.renews === undefined ? null : ssh]).then(([{ globalArgs }, clientStartTime]) =>
      deps.containers.prepare({
        sessionId,
        renews: input.renews,
        engine: input.engine,
        path: input.client.path ?? '',
        env: engineEnv(input.client.env ?? {}),
        globalArgs,
        clientPid: input.client.pid,
        clientStartTime,
      }),
    ),
    () => deps.containers.abandon(sessionId),
  );
  const git = checked.then(({ cwd }) => gitFactsOf(input, cwd, deps));
  const cloud = checked.then(({ containerHome, relabel }) =>
    input.cloudCredentials
      ? cloudCredentialMounts({ hostHome: deps.hostHome, containerHome: containerHome ?? deps.hostHome, googleApplicationCredentials: input.client.env?.GOOGLE_APPLICATION_CREDENTIALS, relabel })
      : { mounts: [], env: {} },
  );
  const users = checked.then(() => deps.userEngine(input));
  // Held as soon as git's facts are in, while the agent's socket is still being opened.
  const held = git.then(({ git: facts }) => holdGit(facts));
  const [request, start, where, agent, repo, credentials, userEngine, sandbox] = await settleAll([checked, startTime, site, ssh, git, cloud, users, held]);
  return { ...request, startTime: start, site: where, ssh: agent, ...repo, cloud: credentials, userEngine, container, held: sandbox };
}
