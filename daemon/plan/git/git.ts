import path from 'node:path';
import type { Mount } from '../../../shared/contracts/plan.js';
import { dualHomeMounts, type HomeFile } from '../dual-home.js';
import { CONTAINER_GIT_CONFIG } from './git-global.js';
import { SandboxdError } from '../../../shared/errors.js';
import type { GitDirFacts, Oddity } from './git-dir.js';
import { REPOSITORY_PURPOSE_PREFIX } from '../../../shared/contracts/plan.js';

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
  /** Canonical; the work tree the plan mounts. */
  topLevel: string;
  /** The session's own git dir (a linked worktree's admin dir; else the common dir). */
  gitDir: string;
  commonDir: string;
  kind: 'plain' | 'worktree' | 'submodule';
  /** `<topLevel>/.git`: the git dir itself (plain clone) or the file that names it. */
  dotGit: string;
  /** The common dir and everything in it: config, hooks, worktrees' admin dirs, submodules' git dirs. */
  facts: GitDirFacts;
  /**
   * The outermost repository's common dir and what it holds: the repository itself, or a
   * submodule's outermost superproject. The sandbox's git dir is kept per outer common dir.
   */
  outer: { commonDir: string; facts: GitDirFacts };
  /** Every linked worktree registered in the repository (and in its submodules). */
  worktrees: readonly LinkedWorktree[];
  /** The submodules' git dirs, nested ones included. */
  submodules: readonly SubmoduleGitDir[];
  /**
   * `core.hooksPath` directories that lie inside the work tree or git dir (husky's `.husky/_`,
   * `.githooks`): the repository config's, and the effective one when git could be asked.
   * Existing ones are mounted read-only.
   */
  hooksPaths: readonly HooksPath[];
  /** Files the repository's config includes that lie inside the work tree or git dir and exist. */
  includes: readonly string[];
  /** The same, not there yet: the sandbox could create them (the guard watches for them). */
  pendingIncludes: readonly string[];
  /** What a read-only mount cannot hold in place (symbolic links), by the protection it defeats. */
  unguardable: { hooks: readonly Oddity[]; config: readonly Oddity[] };
  /** Paths whose change invalidates this description (the walk up, the git dirs looked at). */
  watched: readonly string[];
}

/**
 * The sandbox's own git dir for the session's repository (kept by the daemon, DESIGN §8), as the
 * plan mounts it: read-write at the host's common dir, with the daemon's read-only files over it
 * and the host's object stores read-only where its alternates name them.
 */
export interface SandboxGitDir {
  /** The sandbox's git dir on the host. */
  source: string;
  /** The host's (outer) common dir: the container sees the sandbox's git dir there. */
  target: string;
  /** The daemon's read-only files over it, at the host path they stand for. */
  files: { source: string; target: string; kind: 'config' | 'alternates' | 'pointer' }[];
  /** The hooks/ of each git dir in it: an empty read-only directory over each unless hooks are writable. */
  hooks: string[];
  /** The host's object stores, each read-only at the container path the alternates name. */
  objects: { source: string; target: string }[];
  /** Container paths of host stores' own alternates files, each covered with an empty file. */
  coveredAlternates: string[];
  /** An empty read-only file. */
  emptyFile: string;
  /** What the host's git follows from the work tree into a repository, held in place (pins.ts). */
  pins: WorkTreePins;
}

/** Paths in the work tree held in place so the host's git never enters a repository the sandbox made. */
export interface WorkTreePins {
  /** Directories that become mount points of their own (read-write): they cannot be renamed or replaced. */
  selfBinds: readonly string[];
  /** Files (`.git` files, a file where the index has a submodule) mounted read-only over themselves. */
  readOnly: readonly string[];
  /** An unpopulated submodule's directory (or a missing one on the way): an empty read-only directory over it. */
  empty: readonly string[];
}

export interface HooksPath {
  path: string;
  exists: boolean;
}

/** A submodule's own git dir: git runs its hooks and reads its config on the host, as the superproject's. */
export interface SubmoduleGitDir {
  dir: string;
  /** Its work tree (`core.worktree` of its config), which git's ownership check names. */
  workTree: string | null;
  /** The work tree's `.git` file, when it names this git dir back. */
  dotGit: string | null;
}

export interface LinkedWorktree {
  /** `<common dir>/worktrees/<name>`. */
  admin: string;
  /** The `.git` file of its work tree, as `<admin>/gitdir` names it, when that file names the admin dir back. */
  dotGit: string | null;
}

export type WritePolicy = 'readonly' | 'writable';

export interface RepoPolicy {
  hooks: WritePolicy;
  config: WritePolicy;
}

/**
 * The repository as the sandbox sees it (DESIGN §8). The host's git dirs are never writable: the
 * sandbox's own git dir is mounted read-write at the host's common dir (so every path the host's
 * layout uses resolves the same way), with the daemon's read-only files over it (its config and
 * hooks unless the session lets the sandbox change its own copies; alternates; worktree pointers)
 * and the host's object stores read-only where its alternates name them. In the work tree, which
 * stays writable, what the host's git follows into a repository is held in place (the worktree's
 * own `.git` file read-only, the pins of its submodules and other worktrees); the files the host's
 * git reads there (a `core.hooksPath`, config includes) are protected with the user's config's
 * (git-paths.ts).
 */
export function repoMounts(repo: GitRepo, sandbox: SandboxGitDir, policy: RepoPolicy, emptyDir: string, relabel: Mount['relabel']): Mount[] {
  for (const layer of ['hooks', 'config'] as const) {
    const odd = repo.unguardable[layer][0];
    if (odd !== undefined) {
      throw new SandboxdError('REPOSITORY_UNSAFE', `${odd.path} ${odd.why}: the sandbox could change what the host's git reads there`, {
        remedy: `Replace ${odd.path} with the real ${layer === 'hooks' ? 'directory' : 'file'} (not a symbolic link).`,
      });
    }
  }
  const mount = (source: string, target: string, readOnly: boolean, purpose: string): Mount => ({ source, target, readOnly, purpose: `${REPOSITORY_PURPOSE_PREFIX}${purpose}`, relabel });
  const mounts: Mount[] = [mount(sandbox.source, sandbox.target, false, "git dir (the sandbox's own)")];
  for (const file of sandbox.files) {
    if (file.kind === 'config' && policy.config === 'writable') continue;
    mounts.push(mount(file.source, file.target, true, `git ${file.kind} (read-only)`));
  }
  if (policy.hooks === 'readonly') for (const hooks of sandbox.hooks) mounts.push(mount(emptyDir, hooks, true, 'git hooks (read-only)'));
  for (const store of sandbox.objects) mounts.push(mount(store.source, store.target, true, 'git objects of the host (read-only)'));
  for (const covered of sandbox.coveredAlternates) mounts.push(mount(sandbox.emptyFile, covered, true, 'git alternates of the host (covered)'));
  if (repo.kind !== 'plain') mounts.push(mount(repo.dotGit, repo.dotGit, true, 'git link (read-only)'));
  for (const dir of sandbox.pins.selfBinds) mounts.push(mount(dir, dir, false, 'work tree path to a submodule (pinned)'));
  for (const file of sandbox.pins.readOnly) mounts.push(mount(file, file, true, 'git link in the work tree (read-only)'));
  for (const dir of sandbox.pins.empty) mounts.push(mount(emptyDir, dir, true, 'unpopulated submodule (read-only)'));
  return mounts;
}

/**
 * What the plan says about the repository's protection, beside its mounts: a warning where the
 * host can still be reached, a notice for an opt-in that stays in the sandbox's own git dir.
 */
export function repoNotes(repo: GitRepo, policy: RepoPolicy): { warnings: string[]; notices: string[] } {
  const warnings: string[] = [];
  const notices: string[] = [];
  for (const hooksPath of repo.hooksPaths) {
    if (hooksPath.exists) {
      warnings.push(`git: core.hooksPath ${hooksPath.path} is inside the repository: it is mounted read-only, but scripts its hooks call from the work tree can still be changed in the sandbox; review them before committing on the host`);
    }
  }
  if (policy.hooks === 'writable') notices.push("git: the sandbox's git dir has writable hooks (--git-hooks writable): they run only in the sandbox; the host's git never reads them");
  if (policy.config === 'writable') notices.push("git: the sandbox's copy of the repository config is writable (--git-config writable): changes stay in the sandbox; the host's config is never written");
  return { warnings, notices };
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
  /** The sandbox's own git dir for `repo` (null when there is no repository). */
  sandbox: SandboxGitDir | null;
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
  const readOnly = (purpose: string) => ({ readOnly: true, purpose, relabel: input.relabel });
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
  if (input.repo !== null && input.sandbox !== null) mounts.push(...repoMounts(input.repo, input.sandbox, input.policy, input.emptyDir, input.relabel));
  return { mounts, env };
}
