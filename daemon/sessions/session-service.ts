import type { AcquireInput, AcquireResponse } from '../../shared/contracts/sessions.js';
import { randomId } from '../os/text.js';
import { planGitSection } from '../plan/git/git-section.js';
import { guardTarget } from '../plan/git/git.js';
import { userMapping } from '../plan/user-namespace.js';
import { gatherFacts, type AcquireFacts, type AcquireFactsDeps } from './acquire-facts.js';
import { assemblePlan, repoPolicy, sessionMounts, type PlanParts } from './assemble-plan.js';
import { DisposalStack } from './disposal-stack.js';
import type { Clock, SessionRegistry } from './session-registry.js';

export interface SessionServiceDeps extends AcquireFactsDeps {
  /** Daemon-owned empty, read-only directory (covers a missing hooks/). */
  emptyDir: string;
  clock: Clock;
  registry: SessionRegistry;
  /** Stores a generated GIT_CONFIG_GLOBAL file and returns its host path. */
  writeGitConfig(content: string): Promise<string>;
  leaseTtlMs: number;
  /** The user the daemon and its clients run as: whose files the container should write. */
  hostUser: { uid: number; gid: number };
}

type Sections = Pick<PlanParts, 'git' | 'site'>;

const ROOT = { uid: 0, gid: 0 } as const;

/**
 * Builds a session's plan and registers the lease that keeps its bridges alive: gather the facts in
 * parallel (acquire-facts.ts), build the plan's sections that cost I/O and assemble the rest from
 * them (assemble-plan.ts), then commit: hold the guard, wait for the container record and register
 * the session. What each stage takes (bridge leases, the container record, the guard's hold) goes
 * on one disposal stack, given back in reverse if any later step fails.
 */
export class SessionService {
  constructor(private readonly deps: SessionServiceDeps) {}

  async acquire(input: AcquireInput): Promise<AcquireResponse> {
    this.deps.registry.assertCapacity();
    const started = this.deps.clock.monotonic();
    const sessionId = randomId('ses');
    const undo = new DisposalStack();
    try {
      const facts = await gatherFacts(input, sessionId, this.deps, undo);
      const sections = await this.sections(input, facts);
      return await this.commit(input, { sessionId, started }, facts, sections, undo);
    } catch (error) {
      await undo.unwind();
      throw error;
    }
  }

  /** The parts of the plan that cost I/O: the git section (it stores a generated config) and what the site sees. */
  private async sections(input: AcquireInput, facts: AcquireFacts): Promise<Sections> {
    const { deps } = this;
    const git = await planGitSection({
      facts: facts.git,
      hostHome: deps.hostHome,
      containerHome: facts.containerHome,
      policy: repoPolicy(input),
      emptyDir: deps.emptyDir,
      relabel: facts.relabel,
      agentForwarded: facts.ssh.ssh.status === 'forwarded',
      writeGlobalConfig: (content) => deps.writeGitConfig(content),
    });
    const expressible = sessionMounts(input, facts, git, deps.hostHome);
    // With a remote engine every mount source is resolved in the VM (DESIGN §6).
    const visible = await facts.site.visible(expressible.mounts);
    return { git, site: { globalArgs: facts.site.globalArgs, mounts: visible.mounts, warnings: [...expressible.warnings, ...facts.site.warnings, ...visible.warnings] } };
  }

  private async commit(input: AcquireInput, { sessionId, started }: { sessionId: string; started: number }, facts: AcquireFacts, sections: Sections, undo: DisposalStack): Promise<AcquireResponse> {
    const { deps } = this;
    // Guarded from before the plan leaves: a file the sandbox changes carries a later ctime.
    undo.defer(() => {
      deps.guard.release(sessionId);
    });
    const holdWarnings = await deps.guard.hold(sessionId, guardTarget(facts.git.repo, facts.cwd, repoPolicy(input), sections.site.mounts));
    const container = await facts.container;
    const users = userMapping({
      engine: facts.userEngine,
      user: input.containerUser ?? ROOT,
      host: deps.hostUser,
      writesHostFiles: sections.site.mounts.some((mount) => !mount.readOnly),
    });
    const answer = assemblePlan({ sessionId, input, facts, ...sections, holdWarnings, users, container, now: deps.clock.now(), leaseTtlMs: deps.leaseTtlMs });
    deps.registry.add(answer.session, facts.startTime, facts.ssh.leases, Math.round((deps.clock.monotonic() - started) * 10) / 10);
    return answer;
  }
}
