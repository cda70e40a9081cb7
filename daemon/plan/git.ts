import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';
import { dualHomeMounts, type HomeFile } from './dual-home.js';
import { CONTAINER_GIT_CONFIG } from './git-global.js';

/** Config files git reads from HOME when it cannot be asked (no git, or a git that fails). */
export const HOME_GIT_FILES = ['.gitconfig', '.config/git/config', '.gitignore_global'] as const;

/**
 * Where the files the user's git config names appear in every container, under directories any
 * container user can traverse: those under the host HOME with HOME's layout, the others under
 * their absolute path (so they never hide the image's own files).
 */
export const CONTAINER_GIT_HOME = '/run/sandboxd/git/home';
export const CONTAINER_GIT_ROOT = '/run/sandboxd/git/root';

/** The path the sandbox reads a host file the git config names at (see CONTAINER_GIT_HOME). */
export function sandboxPath(file: string, hostHome: string): string {
  const relative = path.relative(hostHome, file);
  const inHome = relative !== '..' && !relative.startsWith('../') && !path.isAbsolute(relative);
  return inHome ? path.posix.join(CONTAINER_GIT_HOME, relative) : path.posix.join(CONTAINER_GIT_ROOT, path.posix.resolve(file));
}

/** Where the host's known_hosts files appear in every container, whatever its user's HOME. */
export const CONTAINER_KNOWN_HOSTS_DIR = '/run/sandboxd/known_hosts';

/** A config file as git names it (`path`) and its canonical mount source. */
export type GitConfigFile = HomeFile;

export interface GitRepo {
  /** Canonical paths from `git rev-parse`. */
  topLevel: string;
  gitDir: string;
  commonDir: string;
  /** The workdir's `.git` is a file: a linked worktree (or a submodule). */
  linked: boolean;
  /** Names in the common dir that exist (objects, refs, config, info, hooks, worktrees…). */
  commonEntries: readonly string[];
  /** The linked worktrees registered in the common dir. */
  worktrees: readonly LinkedWorktree[];
  /** `config.worktree` files that exist (per-worktree config, `extensions.worktreeConfig`). */
  worktreeConfigs: readonly string[];
  /** The submodules' git dirs under `<common dir>/modules`, nested ones included. */
  submodules: readonly SubmoduleGitDir[];
}

/** A submodule's own git dir: git runs its hooks and reads its config on the host, as the superproject's. */
export interface SubmoduleGitDir {
  dir: string;
  hooks: boolean;
  config: boolean;
  /** Its work tree (`core.worktree` of its config), which git's ownership check names. */
  workTree: string | null;
}

export interface LinkedWorktree {
  /** `<common dir>/worktrees/<name>`. */
  admin: string;
  /** The `.git` file of its work tree, as `<admin>/gitdir` names it, when that exists. */
  dotGit: string | null;
}

export type WritePolicy = 'readonly' | 'writable';

export interface RepoPolicy {
  hooks: WritePolicy;
  config: WritePolicy;
}

/**
 * What the sandbox may change in a repository (DESIGN §8). Git creates files next to the ones it
 * rewrites and renames them into place (`packed-refs.lock` → `packed-refs`), so a linked
 * worktree's whole common dir is mounted read-write: single files or a few subdirs would send
 * those new files into the container's own layer and lose refs. On top of it, read-only, lies what
 * the host's next git command would run: `hooks/`, `config` and every `config.worktree`. (`info/`
 * stays writable: nothing in it runs, and `git gc` rewrites `info/refs`.) A plain clone's `.git` is
 * inside the work tree mount and gets the same.
 *
 * Other worktrees' admin dirs stay writable (`git gc` expires their reflogs), but `git worktree
 * prune` in the sandbox would delete any whose work tree it cannot see: so each one's `.git` file
 * is mounted read-only where `gitdir` says it is, and `gitdir` itself is read-only.
 */
export function repoMounts(repo: GitRepo, policy: RepoPolicy, emptyDir: string, relabel: Mount['relabel']): Mount[] {
  const label = relabel === undefined ? {} : { relabel };
  const at = (source: string, readOnly: boolean, purpose: string): Mount => ({ source, target: source, readOnly, purpose, ...label });
  const common = (name: string): string => path.join(repo.commonDir, name);
  const mounts: Mount[] = [];
  if (repo.linked) {
    mounts.push(at(repo.commonDir, false, 'git common dir'));
    const inCommon = repo.gitDir === repo.commonDir || repo.gitDir.startsWith(`${repo.commonDir}/`);
    if (!inCommon) mounts.push(at(repo.gitDir, false, 'git worktree'));
  }
  // A missing hooks/ is covered too: the sandbox could create it otherwise.
  const hooks = (dir: string, exists: boolean, purpose: string): Mount =>
    exists ? at(path.join(dir, 'hooks'), true, purpose) : { source: emptyDir, target: path.join(dir, 'hooks'), readOnly: true, purpose, ...label };
  if (policy.hooks === 'readonly') {
    mounts.push(hooks(repo.commonDir, repo.commonEntries.includes('hooks'), 'git hooks (read-only)'));
    for (const submodule of repo.submodules) mounts.push(hooks(submodule.dir, submodule.hooks, 'submodule git hooks (read-only)'));
  }
  if (policy.config === 'readonly') {
    if (repo.commonEntries.includes('config')) mounts.push(at(common('config'), true, 'git config (read-only)'));
    for (const file of repo.worktreeConfigs) mounts.push(at(file, true, 'git config (read-only)'));
    for (const submodule of repo.submodules) {
      if (submodule.config) mounts.push(at(path.join(submodule.dir, 'config'), true, 'submodule git config (read-only)'));
    }
  }
  for (const worktree of repo.worktrees) {
    if (worktree.admin === repo.gitDir) continue;
    mounts.push(at(path.join(worktree.admin, 'gitdir'), true, 'other worktree (read-only)'));
    if (worktree.dotGit !== null) mounts.push(at(worktree.dotGit, true, 'other worktree (read-only)'));
  }
  return mounts;
}

/** A file the git part of the plan mounts read-only. */
export interface GitFileMount {
  source: string;
  target: string;
  purpose: string;
}

export interface GitPlanInput {
  hostHome: string;
  /** The container user's HOME when known; the top-level config files are then also mounted under it. */
  containerHome: string | null;
  /**
   * The user's top-level global config files as the sandbox reads them (`path`: the host path,
   * `source`: what is mounted), for git < 2.32, which ignores GIT_CONFIG_GLOBAL (dual HOME).
   */
  homeFiles: readonly GitConfigFile[];
  /** Everything else the config needs: translations, the files they name, the originals' protection. */
  files: readonly GitFileMount[];
  repo: GitRepo | null;
  policy: RepoPolicy;
  /** A daemon-owned empty directory, mounted read-only where a repo has no hooks dir yet. */
  emptyDir: string;
  /** The generated GIT_CONFIG_GLOBAL file on the host; null when git could not be asked. */
  globalConfig: string | null;
  /** `known_hosts` and `known_hosts2` of the host user, canonical. */
  knownHosts: readonly GitConfigFile[];
  relabel: Mount['relabel'];
}

export interface GitPlan {
  mounts: Mount[];
  env: Record<string, string>;
}

export function containerKnownHostsPath(file: string): string {
  return path.posix.join(CONTAINER_KNOWN_HOSTS_DIR, path.basename(file));
}

/**
 * Every file is read-only. `files` come first (mounts on one target collapse to the first): the
 * originals of the user's config files at their own canonical paths, so that a writable mount
 * that contains one (a dotfiles repository as the workdir) cannot change what the host's git
 * reads; then what the sandbox's git reads under /run/sandboxd/git. The top-level files are also
 * mounted at their host path and under a known container HOME for git < 2.32 (dual HOME).
 * known_hosts, never private keys or ~/.ssh/config (whose IdentityAgent or ProxyCommand name host
 * programs).
 */
export function planGit(input: GitPlanInput): GitPlan {
  const label = input.relabel === undefined ? {} : { relabel: input.relabel };
  const readOnly = (purpose: string) => ({ readOnly: true, purpose, ...label });
  const home = input.containerHome ?? input.hostHome;
  const mounts: Mount[] = input.files.map((file) => ({ source: file.source, target: file.target, ...readOnly(file.purpose) }));
  mounts.push(...input.homeFiles.flatMap((file) => dualHomeMounts(file, input.hostHome, home, readOnly('git config (dual HOME)'))));
  for (const file of input.knownHosts) {
    mounts.push({ source: file.source, target: containerKnownHostsPath(file.path), ...readOnly('ssh known_hosts') });
    if (input.containerHome !== null) mounts.push({ source: file.source, target: path.posix.join(input.containerHome, '.ssh', path.basename(file.path)), ...readOnly('ssh known_hosts') });
  }
  const env: Record<string, string> = { GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' };
  if (input.globalConfig !== null) {
    mounts.push({ source: input.globalConfig, target: CONTAINER_GIT_CONFIG, ...readOnly('git global config (generated)') });
    env.GIT_CONFIG_GLOBAL = CONTAINER_GIT_CONFIG;
  }
  if (input.repo !== null) mounts.push(...repoMounts(input.repo, input.policy, input.emptyDir, input.relabel));
  return { mounts, env };
}
