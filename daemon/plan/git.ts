import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';

/** Config files git reads from HOME when no include or XDG override points elsewhere. */
export const HOME_GIT_FILES = ['.gitconfig', '.config/git/config', '.gitignore_global'] as const;

export interface GitConfigFile {
  /** Where git looks for it on the host. */
  path: string;
  /** Its canonical path (realpath), the mount source. */
  source: string;
}

export interface GitPlanInput {
  hostHome: string;
  containerHome: string;
  /** The config files that exist, in the order git reads them. */
  configFiles: readonly GitConfigFile[];
  relabel: Mount['relabel'];
}

export interface GitPlan {
  mounts: Mount[];
  env: Record<string, string>;
}

/**
 * Dual-HOME (DESIGN §8): each file is mounted read-only at its host path, so absolute include
 * paths in the config resolve, and again under the container user's HOME, where git looks.
 */
export function planGit(input: GitPlanInput): GitPlan {
  const mounts: Mount[] = [];
  for (const file of input.configFiles) {
    const base = { source: file.source, readOnly: true, purpose: 'git config', ...(input.relabel === undefined ? {} : { relabel: input.relabel }) };
    mounts.push({ ...base, target: file.path });
    const relative = path.relative(input.hostHome, file.path);
    if (!relative.startsWith('..') && !path.isAbsolute(relative) && input.containerHome !== input.hostHome) {
      mounts.push({ ...base, target: path.join(input.containerHome, relative) });
    }
  }
  return { mounts, env: { GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' } };
}
