import type { AcquireInput, AcquireResponse } from '../../shared/contracts/sessions.js';
import type { GitSync } from '../gitsync/git-sync.js';
import { randomId } from '../os/text.js';
import { protectGitPaths, type GitPath } from '../plan/git/git-paths.js';
import { planGitSection } from '../plan/git/git-section.js';
import type { SandboxGitDir } from '../plan/git/git.js';
import { userMapping } from '../plan/user-namespace.js';
import { gatherFacts, type AcquireFacts, type AcquireFactsDeps } from './acquire-facts.js';
import type { GitHostFacts } from '../plan/git/git-host.js';
import { assemblePlan, repoPolicy, sessionMounts, writableSources, type PlanParts } from './assemble-plan.js';
import { DisposalStack } from './disposal-stack.js';
import type { Clock, SessionRegistry } from './session-registry.js';

export interface SessionServiceDeps extends AcquireFactsDeps {
  /** Daemon-owned empty, read-only directory (the sandbox's hooks/). */
  emptyDir: string;
  clock: Clock;
  registry: SessionRegistry;
  /** The sandbox's own git dirs: made or refreshed for a session's repository, and brought home. */
  gitSync: Pick<GitSync, 'hold' | 'drop' | 'status' | 'assertRenewable'>;
  /** Stores a generated GIT_CONFIG_GLOBAL file and returns its host path. */
  writeGitConfig(content: string): Promise<string>;
  leaseTtlMs: number;
  /** The user the daemon and its clients run as: whose files the container should write. */
  hostUser: { uid: number; gid: number };
}

type Sections = Pick<PlanParts, 'git' | 'site'>;

/** Every path the host's git reads that the sandbox must not change (git-paths.ts). */
function gitPaths(facts: AcquireFacts, sandbox: SandboxGitDir | null): GitPath[] {
  const { repo } = facts.git;
  const paths: GitPath[] = facts.git.namedPaths.map((named) => ({ ...named }));
  if (repo !== null) {
    paths.push({ path: repo.topLevel, what: "the repository's work tree", kind: 'worktree' }, { path: repo.outer.commonDir, what: "the repository's git dir", kind: 'gitdir' });
    for (const include of [...repo.includes, ...repo.pendingIncludes]) paths.push({ path: include, what: "an include of the repository's config", kind: 'file' });
    for (const hooksPath of repo.hooksPaths) paths.push({ path: hooksPath.path, what: 'core.hooksPath', kind: 'dir' });
  }
  // Stores inside the git dir are covered by the sandbox's own git dir there.
  const within = (file: string): boolean => repo !== null && (file === repo.outer.commonDir || file.startsWith(`${repo.outer.commonDir}/`));
  for (const store of sandbox?.objects ?? []) if (!within(store.source)) paths.push({ path: store.source, what: 'an object store the repository reads', kind: 'dir' });
  return paths;
}

const ROOT = { uid: 0, gid: 0 } as const;

/**
 * Builds a session's plan and registers the lease that keeps its bridges alive: gather the facts in
 * parallel (acquire-facts.ts), hold the sandbox's git dir for the repository, build the plan's
 * sections that cost I/O and assemble the rest from them (assemble-plan.ts), then commit: wait for
 * the container record and register the session. What each stage takes (bridge leases, the
 * container record, the sandbox git dir's hold) goes on one disposal stack, given back in reverse
 * if any later step fails.
 */
export class SessionService {
  constructor(private readonly deps: SessionServiceDeps) {}

  async acquire(input: AcquireInput): Promise<AcquireResponse> {
    this.deps.registry.assertCapacity();
    if (input.renews !== undefined) this.deps.gitSync.assertRenewable(input.renews);
    const started = this.deps.clock.monotonic();
    const sessionId = randomId('ses');
    const undo = new DisposalStack();
    try {
      const facts = await gatherFacts(input, sessionId, this.deps, undo, (git) => this.sandboxGit(sessionId, input, git, undo));
      const sections = await this.sections(input, facts, facts.held);
      return await this.commit(input, { sessionId, started }, facts, sections);
    } catch (error) {
      await undo.unwind();
      throw error;
    }
  }

  /** The sandbox's own git dir for the session's repository, held until the session ends. */
  private async sandboxGit(sessionId: string, input: AcquireInput, git: GitHostFacts, undo: DisposalStack): Promise<SandboxGitDir | null> {
    const { repo } = git;
    if (repo === null) return null;
    undo.defer(() => {
      this.deps.gitSync.drop(sessionId);
    });
    return this.deps.gitSync.hold(sessionId, { repo, git: git.git, path: input.client.path ?? '' });
  }

  /** The parts of the plan that cost I/O: the git section (it stores a generated config) and what the site sees. */
  private async sections(input: AcquireInput, facts: AcquireFacts, sandbox: SandboxGitDir | null): Promise<Sections> {
    const { deps } = this;
    const git = await planGitSection({
      facts: facts.git,
      hostHome: deps.hostHome,
      containerHome: facts.containerHome,
      policy: repoPolicy(input),
      sandbox,
      emptyDir: deps.emptyDir,
      relabel: facts.relabel,
      agentForwarded: facts.ssh.ssh.status === 'forwarded',
      writeGlobalConfig: (content) => deps.writeGitConfig(content),
    });
    const protection = await protectGitPaths({
      paths: gitPaths(facts, sandbox),
      writable: writableSources(input, facts, deps.hostHome),
      allowUnprotected: input.allowUnprotectedGitPaths,
      relabel: facts.relabel,
      memoKey: facts.git,
    });
    const expressible = sessionMounts(input, facts, git, protection.mounts, deps.hostHome);
    // With a remote engine every mount source is resolved in the VM (DESIGN §6).
    const visible = await facts.site.visible(expressible.mounts);
    const warnings = [...protection.warnings, ...expressible.warnings, ...facts.site.warnings, ...visible.warnings];
    return { git, site: { globalArgs: facts.site.globalArgs, mounts: visible.mounts, warnings } };
  }

  private async commit(input: AcquireInput, { sessionId, started }: { sessionId: string; started: number }, facts: AcquireFacts, sections: Sections): Promise<AcquireResponse> {
    const { deps } = this;
    const container = await facts.container;
    const users = userMapping({
      engine: facts.userEngine,
      user: input.containerUser ?? ROOT,
      host: deps.hostUser,
      writesHostFiles: sections.site.mounts.some((mount) => !mount.readOnly),
    });
    const answer = assemblePlan({ sessionId, input, facts, ...sections, gitStatus: deps.gitSync.status(sessionId), users, container, now: deps.clock.now(), leaseTtlMs: deps.leaseTtlMs });
    deps.registry.add(answer.session, facts.startTime, facts.ssh.leases, Math.round((deps.clock.monotonic() - started) * 10) / 10);
    return answer;
  }
}
