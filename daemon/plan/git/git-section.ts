import { AGENT_REMEDY, type Mount } from '../../../shared/contracts/plan.js';
import { clip } from '../../os/text.js';
import { renderGlobalConfig } from './git-global.js';
import type { GitHostFacts } from './git-host.js';
import { planGit, type GitConfigFile, type GitFileMount, type GitPlan, type RepoPolicy, type SandboxGitDir } from './git.js';

export interface GitSectionInput {
  facts: GitHostFacts;
  hostHome: string;
  containerHome: string | null;
  policy: RepoPolicy;
  /** The sandbox's own git dir for the repository (null outside one). */
  sandbox: SandboxGitDir | null;
  emptyDir: string;
  relabel: Mount['relabel'];
  /** Whether the session's agent reaches the container: SSH signing needs it. */
  agentForwarded: boolean;
  /** Stores a generated config file (the global one, or a translation) and returns its host path. */
  writeGlobalConfig(content: string): Promise<string>;
}

export interface GitSection extends GitPlan {
  warnings: string[];
  /** The overrides the generated config makes, which need no action. */
  notices: string[];
}

/** Exactly the repository's own directories, its submodules' included: git refuses a submodule owned by another uid as it refuses the superproject. */
function safeDirectories(repo: GitHostFacts['repo']): string[] {
  if (repo === null) return [];
  const submodules = repo.submodules.flatMap((submodule) => (submodule.workTree === null ? [submodule.dir] : [submodule.workTree, submodule.dir]));
  return [...new Set([repo.topLevel, repo.gitDir, repo.commonDir, ...submodules])];
}

/** The git part of a plan: the generated global config, the user's files translated, the repository. */
export async function planGitSection(input: GitSectionInput): Promise<GitSection> {
  const { facts } = input;
  const warnings = [...facts.warnings];
  const notices: string[] = [];
  let globalConfig: string | null = null;
  const files: GitFileMount[] = [];
  let homeFiles: GitConfigFile[] = facts.plainHomeFiles;
  if (facts.overrides !== null) {
    const translated = await Promise.all(facts.configs.map(async (config) => ({ config, stored: await input.writeGlobalConfig(config.content) })));
    // The originals first, at their own paths: what protects them is that nothing writable covers them.
    files.push(...facts.configs.map((config) => ({ source: config.source, target: config.source, purpose: 'git config' })));
    files.push(...translated.map(({ config, stored }) => ({ source: stored, target: config.target, purpose: clip(`git config from ${config.path}`, 180) })));
    files.push(...facts.files);
    homeFiles = translated.filter(({ config }) => config.topLevel).map(({ config, stored }) => ({ path: config.path, source: stored }));
    const directories = safeDirectories(facts.repo);
    const rendered = renderGlobalConfig({
      includes: facts.configs.filter((config) => config.topLevel).map((config) => config.target),
      safeDirectories: directories,
      settings: facts.overrides.settings,
    });
    globalConfig = await input.writeGlobalConfig(rendered.text);
    for (const refused of rendered.refused) warnings.push(`git: the sandbox cannot write ${refused.section}.${refused.key} for "${clip(refused.subsection ?? '')}" (a newline in its name); it is left out`);
    if (directories.length > 0) {
      notices.push(`git: safe.directory is set to ${directories.join(', ')} in the sandbox, so git trusts this repository whichever user owns it there`);
    }
    warnings.push(...facts.overrides.warnings);
    notices.push(...facts.overrides.notices);
    if (facts.overrides.sshSigning && !input.agentForwarded) {
      warnings.push(`git: commits are signed with SSH keys (gpg.format=ssh) but no agent reaches this container, so signing fails (remedy: ${AGENT_REMEDY})`);
    }
  }
  const plan = planGit({
    hostHome: input.hostHome,
    containerHome: input.containerHome,
    homeFiles,
    files,
    repo: facts.repo,
    sandbox: input.sandbox,
    policy: input.policy,
    emptyDir: input.emptyDir,
    globalConfig,
    knownHosts: facts.knownHosts,
    relabel: input.relabel,
  });
  return { ...plan, warnings, notices };
}
