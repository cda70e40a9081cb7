import path from 'node:path';
import type { SshDeps } from '../plan/host-sockets.js';
import { SandboxdError } from '../../shared/errors.js';
import type { AcquireInput, AcquireResponse, SessionInfo } from '../../shared/contracts/sessions.js';
import type { Mount, Plan } from '../../shared/contracts/plan.js';
import type { Platform } from '../../shared/paths.js';
import { randomId } from '../os/text.js';
import type { PrivacyGate } from '../os/privacy.js';
import type { ProcessProbe } from '../os/process-identity.js';
import type { ContainerSite } from '../podman/engine-site.js';
import type { SessionContainers } from './session-containers.js';
import { engineEnv } from '../containers/engine-cli.js';
import { cloudCredentialMounts, containerEnv } from '../plan/extras.js';
import { dedupeMounts, flattenArgs, relabelFor } from '../plan/flatten.js';
import { hardenFlags } from '../plan/harden.js';
import type { GitHostFacts, GitHostInput } from '../plan/git/git-host.js';
import { planGitSection } from '../plan/git/git-section.js';
import { guardTarget, repoWarnings } from '../plan/git/git.js';
import type { RepoGuards } from '../guard/repo-guards.js';
import { expressibleMounts } from '../plan/mount-args.js';
import { canonicalIfExists, resolveMountSpecs } from '../plan/mount-spec.js';
import { workdirMount } from '../plan/workdir.js';
import { planSsh, type SshSection } from '../plan/ssh.js';
import type { Clock, SessionRegistry } from './session-registry.js';

const ROOT_USER = { uid: 0, gid: 0, home: '/root' } as const;

function releaseLeases(section: SshSection | null): void {
  for (const lease of section?.leases ?? []) lease.release();
}

export interface SessionServiceDeps {
  platform: Platform;
  hostHome: string;
  /** Daemon-owned empty, read-only directory (covers a missing hooks/). */
  emptyDir: string;
  clock: Clock;
  probe: ProcessProbe;
  registry: SessionRegistry;
  ssh: SshDeps;
  gitFacts(input: GitHostInput): Promise<GitHostFacts>;
  /** Refuses a workdir macOS privacy keeps the daemon from reading, before anything reads it. */
  privacy: PrivacyGate;
  /** Watches what the session's sandbox can write in its repository; checks it first when nobody did. */
  guard: Pick<RepoGuards, 'before' | 'hold' | 'release'>;
  /** Stores a generated GIT_CONFIG_GLOBAL file and returns its host path. */
  writeGitConfig(content: string): Promise<string>;
  /** Labels the session's container and names its cidfile; removes it when the session dies. */
  containers: Pick<SessionContainers, 'prepare' | 'abandon'>;
  /** Where the session's containers run (a Podman connection's VM, or here) and what it sees. */
  site(input: AcquireInput): Promise<ContainerSite>;
  leaseTtlMs: number;
}

/** Builds a session's plan from its parts and registers the lease that keeps its bridges alive. */
export class SessionService {
  constructor(private readonly deps: SessionServiceDeps) {}

  async acquire(input: AcquireInput): Promise<AcquireResponse> {
    const { deps } = this;
    deps.registry.assertCapacity();
    // The client's start time needs only its pid: read while the cwd is resolved. Where it costs a
    // subprocess, the registry's next sweep records it instead, except for a renewal (rare): only
    // the client that held a container may take it over, and that is told by its start time.
    const startPending =
      deps.probe.cheapStartTime || input.renews !== undefined ? deps.probe.startTime(input.client.pid) : Promise.resolve(null);
    startPending.catch(() => undefined);
    const cwd = await canonicalIfExists(input.client.cwd);
    if (cwd === null) throw new SandboxdError('BAD_REQUEST', `the client's cwd ${input.client.cwd} does not exist`);
    await deps.privacy.check(cwd);
    const user = input.containerUser ?? ROOT_USER;
    const home = user.home ?? (user.uid === 0 ? ROOT_USER.home : undefined);
    const containerHome = home === undefined ? null : path.resolve(home);
    const relabel = relabelFor(input.engine, deps.platform);
    const clientEnv = input.client.env ?? {};
    // Invalid input fails here, before any bridge is held.
    const requested = await resolveMountSpecs(input.mounts, relabel);

    // Independent lookups run together: a warm acquire is a few small reads and one connect.
    // Only the ssh section holds a bridge, so it is the one to give back if anything fails.
    const sshPending = planSsh(input, deps.ssh);
    sshPending.catch(() => undefined);
    const sitePending = deps.site(input);
    sitePending.catch(() => undefined);
    const id = randomId('ses');
    // The container record must be on disk before the plan is handed out, not before it is
    // computed: it needs only the site and the start time, so it is written while the git and ssh
    // sections are built (its four thread-pool hops were the warm acquire's critical path). A
    // renewal takes a container over, so it waits for its bridges: one that fails takes nothing.
    const recordAfter = input.renews === undefined ? Promise.resolve() : sshPending;
    const recorded = Promise.all([sitePending, startPending, recordAfter]).then(([site, startTime]) =>
      deps.containers.prepare({
        sessionId: id,
        renews: input.renews,
        engine: input.engine,
        path: input.client.path ?? '',
        env: engineEnv(clientEnv),
        globalArgs: site.globalArgs,
        clientPid: input.client.pid,
        clientStartTime: startTime,
      }),
    );
    recorded.catch(() => undefined);
    let ssh: SshSection | null = null;
    let held = false;
    try {
      // What a sandbox left in the repository while nobody watched is moved aside before its
      // layout is read for this plan.
      let guardWarnings: string[] = [];
      const gitPending = deps.guard.before(cwd).then((warnings) => {
        guardWarnings = warnings;
        return deps.gitFacts({ hostHome: deps.hostHome, cwd, path: input.client.path ?? '', xdgConfigHome: clientEnv.XDG_CONFIG_HOME }).catch((error: unknown) => {
          throw deps.privacy.explain(cwd, error);
        });
      });
      const [startTime, git, cloud, site] = await Promise.all([
        startPending,
        gitPending,
        input.cloudCredentials
          ? cloudCredentialMounts({ hostHome: deps.hostHome, containerHome: containerHome ?? deps.hostHome, googleApplicationCredentials: clientEnv.GOOGLE_APPLICATION_CREDENTIALS, relabel })
          : Promise.resolve({ mounts: [], env: {} }),
        sitePending,
      ]);
      ssh = await sshPending;
      const gitPlan = await planGitSection({
        facts: git,
        hostHome: deps.hostHome,
        containerHome,
        policy: { hooks: input.gitHooks, config: input.gitConfig },
        emptyDir: deps.emptyDir,
        relabel,
        agentForwarded: ssh.ssh.status === 'forwarded',
        writeGlobalConfig: (content) => deps.writeGitConfig(content),
      });
      const workdir: Mount[] = input.workdir
        ? [workdirMount({ cwd, repoTop: git.repo?.topLevel ?? null, hostHome: deps.hostHome, allowWide: input.allowWideWorkdir, relabel })]
        : [];
      const expressible = expressibleMounts(dedupeMounts([...ssh.mounts, ...workdir, ...gitPlan.mounts, ...requested, ...cloud.mounts]));
      // With a remote engine every mount source is resolved in the VM (DESIGN §6).
      const shared = await site.visible(expressible.mounts);
      const mounts = { mounts: shared.mounts, warnings: [...expressible.warnings, ...site.warnings, ...shared.warnings] };
      const planEnv = { ...gitPlan.env, ...ssh.env, ...cloud.env };
      const passed = containerEnv(clientEnv, input.passEnv, new Set(Object.keys(planEnv)));
      const globalArgs = site.globalArgs;
      const policy = { hooks: input.gitHooks, config: input.gitConfig };
      // Guarded from before the plan leaves: a file the sandbox changes carries a later ctime.
      held = true;
      guardWarnings.push(...(await deps.guard.hold(id, guardTarget(git.repo, cwd, policy, mounts.mounts))));
      const container = await recorded;
      const body: Omit<Plan, 'args'> = {
        mounts: mounts.mounts,
        env: { ...planEnv, ...passed.env },
        spawnEnv: passed.spawnEnv,
        globalArgs,
        flags: [...ssh.flags, ...(input.workdir ? ['--workdir', cwd] : []), ...container.flags, ...(input.harden ? hardenFlags() : [])],
        warnings: [...guardWarnings, ...ssh.warnings, ...gitPlan.warnings, ...(git.repo === null ? [] : repoWarnings(git.repo, policy)), ...mounts.warnings, ...passed.warnings],
      };
      const now = new Date(deps.clock.now()).toISOString();
      const session: SessionInfo = {
        id,
        engine: input.engine,
        label: input.label ?? null,
        clientPid: input.client.pid,
        createdAt: now,
        lastHeartbeatAt: now,
        ssh: ssh.ssh,
        container: container.container,
      };
      deps.registry.add(session, startTime, ssh.leases);
      return {
        session,
        plan: { ...body, args: flattenArgs(body) },
        leaseTtlMs: deps.leaseTtlMs,
        heartbeatIntervalMs: Math.max(1000, Math.floor(deps.leaseTtlMs / 3)),
        sockets: ssh.sockets,
      };
    } catch (error) {
      if (held) deps.guard.release(id);
      releaseLeases(ssh ?? (await sshPending.catch(() => null)));
      // No container can have started from a plan that was never handed out. The record is
      // forgotten only once it is written, or the write would bring it back (one never written
      // is nothing to forget).
      await recorded.catch(() => undefined);
      await deps.containers.abandon(id);
      throw error;
    }
  }
}
