import type { Mount } from '../../shared/contracts/plan.js';
import { renderGlobalConfig } from './git-global.js';
import type { GitHostFacts } from './git-host.js';
import { planGit, sandboxPath, type GitPlan, type RepoPolicy } from './git.js';

export interface GitSectionInput {
  facts: GitHostFacts;
  hostHome: string;
  containerHome: string | null;
  policy: RepoPolicy;
  emptyDir: string;
  relabel: Mount['relabel'];
  /** Whether the session's agent reaches the container: SSH signing needs it. */
  agentForwarded: boolean;
  /** Stores the generated global config and returns its host path. */
  writeGlobalConfig(content: string): Promise<string>;
}

export interface GitSection extends GitPlan {
  warnings: string[];
}

/** The git part of a plan: the generated global config, the files it includes, the repository. */
export async function planGitSection(input: GitSectionInput): Promise<GitSection> {
  const { facts } = input;
  const warnings = [...facts.warnings];
  let globalConfig: string | null = null;
  if (facts.overrides !== null) {
    const repo = facts.repo;
    // Exactly the repository's own directories, its submodules' included: git refuses a
    // submodule owned by another uid as it refuses the superproject.
    const safeDirectories =
      repo === null
        ? []
        : [...new Set([repo.topLevel, repo.gitDir, repo.commonDir, ...repo.submodules.flatMap((submodule) => (submodule.workTree === null ? [submodule.dir] : [submodule.workTree, submodule.dir]))])];
    globalConfig = await input.writeGlobalConfig(
      renderGlobalConfig({
        includes: facts.includes.map((file) => sandboxPath(file, input.hostHome)),
        safeDirectories,
        settings: facts.overrides.settings,
      }),
    );
    warnings.push(...facts.overrides.warnings);
    if (facts.overrides.sshSigning && !input.agentForwarded) {
      warnings.push('git: commits are signed with SSH keys (gpg.format=ssh) but no agent reaches this container, so signing fails (remedy: forward the agent, --ssh-agent on)');
    }
  }
  const plan = planGit({
    hostHome: input.hostHome,
    containerHome: input.containerHome,
    configFiles: facts.configFiles,
    repo: facts.repo,
    policy: input.policy,
    emptyDir: input.emptyDir,
    globalConfig,
    knownHosts: facts.knownHosts,
    signingKey: facts.signingKey,
    relabel: input.relabel,
  });
  return { ...plan, warnings };
}
