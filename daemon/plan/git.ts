import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';
import { dualHomeMounts, type HomeFile } from './dual-home.js';

/** Config files git reads from HOME when it cannot be asked (no git on the session's PATH). */
export const HOME_GIT_FILES = ['.gitconfig', '.config/git/config', '.gitignore_global'] as const;

/** What a linked worktree needs from the common dir, and how (DESIGN §8). */
const COMMON_DIR_GRANTS: readonly { name: string; readOnly: boolean }[] = [
  { name: 'objects', readOnly: false },
  { name: 'refs', readOnly: false },
  { name: 'logs', readOnly: false },
  { name: 'packed-refs', readOnly: false },
  { name: 'config', readOnly: true },
  { name: 'info', readOnly: true },
];

/** A config file as git names it (`path`) and its canonical mount source. */
export type GitConfigFile = HomeFile;

export interface GitRepo {
  /** Canonical paths from `git rev-parse`. */
  topLevel: string;
  gitDir: string;
  commonDir: string;
  /** The workdir's `.git` is a file: a linked worktree. */
  linked: boolean;
  /** Names in the common dir that exist (objects, refs, logs, packed-refs, config, info, hooks). */
  commonEntries: readonly string[];
}

export type HooksPolicy = 'readonly' | 'writable';

export interface GitPlanInput {
  hostHome: string;
  containerHome: string;
  /** The config files that exist, in the order git reads them. */
  configFiles: readonly GitConfigFile[];
  repo: GitRepo | null;
  hooks: HooksPolicy;
  /** A daemon-owned empty directory, mounted read-only where a repo has no hooks dir yet. */
  emptyDir: string;
  relabel: Mount['relabel'];
}

export interface GitPlan {
  mounts: Mount[];
  env: Record<string, string>;
}

/**
 * Dual-HOME (DESIGN §8): each config file is mounted read-only at its host path, so absolute
 * include paths resolve, and again under the container user's HOME, where git looks. A linked
 * worktree gets the parts of the common dir git writes, read-write at their host paths; `hooks/`
 * is never writable by default, because a hook planted from the sandbox would run unsandboxed on
 * the host's next commit.
 */
export function planGit(input: GitPlanInput): GitPlan {
  const label = input.relabel === undefined ? {} : { relabel: input.relabel };
  const mounts: Mount[] = input.configFiles.flatMap((file) =>
    dualHomeMounts(file, input.hostHome, input.containerHome, { readOnly: true, purpose: 'git config', ...label }),
  );
  const { repo } = input;
  if (repo !== null) {
    const at = (source: string, readOnly: boolean, purpose: string): Mount => ({ source, target: source, readOnly, purpose, ...label });
    if (repo.linked) {
      mounts.push(at(repo.gitDir, false, 'git worktree'));
      for (const grant of COMMON_DIR_GRANTS) {
        if (repo.commonEntries.includes(grant.name)) mounts.push(at(path.join(repo.commonDir, grant.name), grant.readOnly, 'git common dir'));
      }
    }
    const hooksDir = path.join(repo.commonDir, 'hooks');
    const hasHooks = repo.commonEntries.includes('hooks');
    if (input.hooks === 'readonly') {
      // A plain clone's .git is inside the workdir mount; cover hooks/ even when it is missing.
      if (hasHooks) mounts.push(at(hooksDir, true, 'git hooks (read-only)'));
      else if (!repo.linked) mounts.push({ source: input.emptyDir, target: hooksDir, readOnly: true, purpose: 'git hooks (read-only)', ...label });
    } else if (repo.linked && hasHooks) {
      mounts.push(at(hooksDir, false, 'git hooks (writable by policy)'));
    }
  }
  return { mounts, env: { GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' } };
}
