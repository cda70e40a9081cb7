import path from 'node:path';
import type { Mount } from '../../../shared/contracts/plan.js';
import { dualHomeMounts, type HomeFile } from '../dual-home.js';
import { CONTAINER_GIT_CONFIG } from './git-global.js';
import { SandboxdError } from '../../../shared/errors.js';
import { allGitDirs, type Entry, type GitDirFacts, type Oddity } from '../../guard/git-dir.js';
import type { GuardTarget } from '../../guard/repo-guards.js';

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

const POLICY_FLAGS = { hooks: '--git-hooks writable', config: '--git-config writable' } as const;

/**
 * What the sandbox may change in a repository (DESIGN §8). Git creates files next to the ones it
 * rewrites and renames them into place (`packed-refs.lock` → `packed-refs`), so the git dirs are
 * mounted read-write, each at its own path: a directory that is a mount point cannot be renamed or
 * replaced from the sandbox, so every existing git dir (the common dir, each worktree's admin dir,
 * each submodule's) stays the one the host's git reads. On top of them lies, read-only, every file
 * that decides what the host's next git command runs or where it looks: `hooks/` (an empty
 * read-only directory where missing), `config` and every `config.worktree` (and the files the
 * config includes from inside the repository), the worktree's own `.git` file, every worktree's
 * `gitdir` and `commondir`, `objects/info/alternates`, and the `.git` files of submodules and other
 * worktrees that name their git dir back. (`info/` stays writable: nothing in it runs, and
 * `git gc` rewrites `info/refs`.) What does not exist yet cannot be mounted: the guard watches it.
 *
 * `--git-hooks writable` / `--git-config writable` drop the hooks and config layers.
 */
export function repoMounts(repo: GitRepo, policy: RepoPolicy, emptyDir: string, relabel: Mount['relabel']): Mount[] {
  for (const layer of ['hooks', 'config'] as const) {
    const odd = repo.unguardable[layer][0];
    if (policy[layer] === 'readonly' && odd !== undefined) {
      throw new SandboxdError('REPOSITORY_UNSAFE', `${odd.path} ${odd.why}: the sandbox cannot keep the repository's ${layer} read-only`, {
        remedy: `Replace ${odd.path} with the real ${layer === 'hooks' ? 'directory (or set core.hooksPath to it)' : 'file'}, or pass ${POLICY_FLAGS[layer]} to let the sandbox change it.`,
      });
    }
  }
  const at = (source: string, readOnly: boolean, purpose: string): Mount => ({ source, target: source, readOnly, purpose, relabel });
  const gitDirs = allGitDirs(repo.facts);
  const admins = gitDirs.flatMap((gitDir) => gitDir.worktrees);
  const pinned = [repo.commonDir, repo.gitDir, ...gitDirs.flatMap((gitDir) => [gitDir.dir, ...containers(gitDir)]), ...admins.map((admin) => admin.admin)];
  const mounts: Mount[] = [...new Set(pinned)].map((dir) => at(dir, false, 'git dir (read-write, pinned)'));
  const file = (entry: Entry | null, purpose: string): Mount[] => (entry?.kind === 'file' ? [at(entry.path, true, purpose)] : []);
  if (repo.kind !== 'plain') mounts.push(at(repo.dotGit, true, 'git link (read-only)'));
  for (const admin of admins) mounts.push(...file(admin.gitdir, 'git worktree link (read-only)'), ...file(admin.commondir, 'git worktree link (read-only)'));
  for (const linked of [...repo.worktrees, ...repo.submodules]) if (linked.dotGit !== null) mounts.push(at(linked.dotGit, true, 'git link (read-only)'));
  for (const gitDir of gitDirs) mounts.push(...file(gitDir.alternates, 'git alternates (read-only)'));
  if (policy.hooks === 'readonly') {
    // A missing hooks/ is covered too: the sandbox could create it otherwise.
    for (const gitDir of gitDirs) {
      const target = path.join(gitDir.dir, 'hooks');
      mounts.push(gitDir.hooks === null ? { source: emptyDir, target, readOnly: true, purpose: 'git hooks (read-only)', relabel } : at(target, true, 'git hooks (read-only)'));
    }
    for (const hooksPath of repo.hooksPaths) if (hooksPath.exists) mounts.push(at(hooksPath.path, true, 'git core.hooksPath (read-only)'));
  }
  if (policy.config === 'readonly') {
    for (const gitDir of gitDirs) mounts.push(...file(gitDir.config, 'git config (read-only)'), ...file(gitDir.configWorktree, 'git config (read-only)'));
    for (const admin of admins) mounts.push(...file(admin.configWorktree, 'git config (read-only)'));
    for (const include of repo.includes) mounts.push(at(include, true, 'git config include (read-only)'));
  }
  return mounts;
}

/** `worktrees/` and `modules/` of a git dir, when they exist: renaming them would carry what they hold away. */
function containers(gitDir: GitDirFacts): string[] {
  return ['worktrees', 'modules'].map((name) => path.join(gitDir.dir, name)).filter((dir) => gitDir.dirs.includes(dir));
}

/** What the plan says about the repository's protection, beside its mounts. */
export function repoWarnings(repo: GitRepo, policy: RepoPolicy): string[] {
  const warnings: string[] = [];
  for (const hooksPath of policy.hooks === 'readonly' ? repo.hooksPaths : []) {
    warnings.push(
      hooksPath.exists
        ? `git: core.hooksPath ${hooksPath.path} is inside the repository: it is mounted read-only, but scripts its hooks call from the work tree can still be changed in the sandbox; review them before committing on the host`
        : `git: core.hooksPath ${hooksPath.path} is inside the repository and does not exist yet: hooks the sandbox puts there would run on the host; the guard removes any that appear`,
    );
  }
  if (policy.hooks === 'writable') warnings.push("git: the repository's hooks are writable in the sandbox (--git-hooks writable): hooks it writes run on the host's next git command");
  if (policy.config === 'writable') warnings.push("git: the repository's config is writable in the sandbox (--git-config writable): programs it names run on the host's next git command");
  return warnings;
}

function within(file: string, dirs: readonly string[]): boolean {
  return dirs.some((dir) => file === dir || file.startsWith(`${dir}/`));
}

/**
 * What the guard watches for a session: its repository (keyed by the common dir, which worktrees
 * share), or the bare workdir when there is none; and what the final plan holds read-only there.
 */
export function guardTarget(repo: GitRepo | null, cwd: string, policy: RepoPolicy, mounts: readonly Mount[]): GuardTarget {
  const roots = repo === null ? [cwd] : [repo.topLevel, repo.commonDir, repo.gitDir];
  const readOnly = mounts.filter((mount) => mount.readOnly && within(mount.target, roots)).map((mount) => mount.target);
  const writable = { hooksWritable: policy.hooks === 'writable', configWritable: policy.config === 'writable' };
  if (repo === null) return { key: cwd, scope: { tops: [cwd], commonDir: null, pendingIncludes: [], hooksPaths: [] }, ...writable, readOnly };
  return {
    key: repo.commonDir,
    scope: { tops: [repo.topLevel], commonDir: repo.commonDir, pendingIncludes: repo.pendingIncludes, hooksPaths: repo.hooksPaths.map((hooksPath) => hooksPath.path) },
    ...writable,
    readOnly,
  };
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
  if (input.repo !== null) mounts.push(...repoMounts(input.repo, input.policy, input.emptyDir, input.relabel));
  return { mounts, env };
}
