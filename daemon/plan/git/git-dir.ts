import path from 'node:path';
import type { Stats } from 'node:fs';
import { identity, listDir, lstatOrNull, readControlFile } from '../../os/untrusted-files.js';

/** What is at one control path, as `lstat` saw it (never followed). */
export interface Entry {
  path: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  /** `dev:ino`. */
  identity: string;
  ctimeMs: number;
  size: number;
}

/** A control position that holds something git never puts there. */
export interface Oddity {
  path: string;
  why: string;
}

export interface WorktreeAdmin {
  /** `<git dir>/worktrees/<name>`. */
  admin: string;
  entry: Entry;
  commondir: Entry | null;
  /** The text of `commondir` (trimmed) when it is a regular file. */
  commondirText: string | null;
  gitdir: Entry | null;
  gitdirText: string | null;
  configWorktree: Entry | null;
  /** Without a `commondir` the admin dir is a git dir of its own: its config and hooks count. */
  own: GitDirFacts | null;
  /** Submodules of this worktree (`<admin>/modules`). */
  modules: GitDirFacts[];
}

/** One git dir (a common dir, a submodule's, a nested repository's) and what it holds. */
export interface GitDirFacts {
  dir: string;
  entry: Entry;
  commondir: Entry | null;
  config: Entry | null;
  configWorktree: Entry | null;
  hooks: Entry | null;
  alternates: Entry | null;
  worktrees: WorktreeAdmin[];
  modules: GitDirFacts[];
  oddities: Oddity[];
  /** More git dirs than MAX_GIT_DIRS: those past the bound were not looked at. */
  truncated: boolean;
  /** Every directory looked at: watched while sessions run, and by the git facts cache. */
  dirs: string[];
}

/** Text files git keeps short; anything longer is not one git wrote. */
export const CONTROL_FILE_MAX_BYTES = 4096;
/** Bounds on the walk: past them the repository is refused rather than half protected. */
export const MAX_GIT_DIRS = 512;
const MAX_MODULE_DEPTH = 8;

export function entryOf(file: string, stat: Stats): Entry {
  const kind = stat.isSymbolicLink() ? 'symlink' : stat.isDirectory() ? 'dir' : stat.isFile() ? 'file' : 'other';
  return { path: file, kind, identity: identity(stat), ctimeMs: stat.ctimeMs, size: stat.size };
}

export async function entryAt(file: string): Promise<Entry | null> {
  const stat = await lstatOrNull(file);
  return stat === null ? null : entryOf(file, stat);
}

/** The trimmed text of a regular control file; null for anything else. */
export async function controlText(entry: Entry | null): Promise<string | null> {
  if (entry?.kind !== 'file') return null;
  try {
    return (await readControlFile(entry.path, CONTROL_FILE_MAX_BYTES)).trim();
  } catch {
    return null;
  }
}

class Budget {
  used = 0;
  exceeded = false;

  take(): boolean {
    this.used += 1;
    if (this.used > MAX_GIT_DIRS) this.exceeded = true;
    return !this.exceeded;
  }
}

/** A directory that must be one: anything else there is an oddity (a symlink would redirect git). */
function expectDir(entry: Entry | null, oddities: Oddity[]): boolean {
  if (entry === null) return false;
  if (entry.kind === 'dir') return true;
  oddities.push({ path: entry.path, why: entry.kind === 'symlink' ? 'is a symbolic link' : 'is not a directory' });
  return false;
}

async function worktreeAdmin(admin: string, entry: Entry, budget: Budget, oddities: Oddity[], dirs: string[]): Promise<WorktreeAdmin> {
  const [found, gitdir, configWorktree] = await Promise.all(['commondir', 'gitdir', 'config.worktree'].map((name) => entryAt(path.join(admin, name))));
  let commondir = found ?? null;
  for (const file of [commondir, gitdir, configWorktree]) {
    if (file !== null && file !== undefined && file.kind !== 'file') oddities.push({ path: file.path, why: file.kind === 'symlink' ? 'is a symbolic link' : 'is not a regular file' });
  }
  const [firstText, gitdirText] = await Promise.all([controlText(commondir), controlText(gitdir ?? null)]);
  let commondirText = firstText;
  let own = commondir === null ? await describeGitDir(admin, entry, budget, 0) : null;
  // `git worktree add` writes `commondir` just after creating the admin dir: one that appeared
  // since the look above makes this a worktree's admin dir, whose `commondir` must lead home.
  if (own !== null && own.commondir !== null) {
    commondir = own.commondir;
    commondirText = await controlText(commondir);
    own = null;
  }
  const modulesEntry = own === null ? await entryAt(path.join(admin, 'modules')) : null;
  const modules = expectDir(modulesEntry, oddities) ? await moduleGitDirs(path.join(admin, 'modules'), budget, 0, oddities, dirs) : [];
  return {
    admin,
    entry,
    commondir,
    commondirText,
    gitdir: gitdir ?? null,
    gitdirText,
    configWorktree: configWorktree ?? null,
    own,
    modules,
  };
}

/** A directory under `modules/` is a submodule's git dir when it holds any of these. */
const GIT_DIR_MARKERS = ['HEAD', 'config', 'objects', 'hooks', 'commondir'];

/** `modules/<name>` may contain slashes: walk down to the directories that are git dirs. */
async function moduleGitDirs(dir: string, budget: Budget, depth: number, oddities: Oddity[], dirs: string[]): Promise<GitDirFacts[]> {
  if (!budget.take()) return [];
  dirs.push(dir);
  const found: GitDirFacts[] = [];
  for (const child of await listDir(dir)) {
    const full = path.join(dir, child.name);
    if (child.isSymbolicLink()) {
      oddities.push({ path: full, why: 'is a symbolic link' });
      continue;
    }
    if (!child.isDirectory()) continue;
    const entry = await entryAt(full);
    if (entry?.kind !== 'dir') continue;
    const names = new Set((await listDir(full)).map((grandchild) => grandchild.name));
    if (GIT_DIR_MARKERS.some((marker) => names.has(marker))) found.push(await describeGitDir(full, entry, budget, depth + 1));
    else if (depth < MAX_MODULE_DEPTH) found.push(...(await moduleGitDirs(full, budget, depth + 1, oddities, dirs)));
    else oddities.push({ path: full, why: 'is nested deeper than sandboxd looks' });
  }
  return found;
}

/**
 * Everything in one git dir that decides what git runs or where it looks: `commondir`, `config`,
 * `config.worktree`, `hooks`, `objects/info/alternates`, the linked worktrees' admin dirs and the
 * submodules' git dirs (nested ones too). Nothing is followed: symbolic links are reported.
 */
export async function describeGitDir(dir: string, entry: Entry, budget: Budget = new Budget(), depth = 0): Promise<GitDirFacts> {
  const oddities: Oddity[] = [];
  const dirs = [dir];
  budget.take();
  const names = ['commondir', 'config', 'config.worktree', 'hooks', 'objects', 'objects/info', 'objects/info/alternates', 'worktrees', 'modules'];
  const [commondir, config, configWorktree, hooks, objects, objectsInfo, alternates, worktreesEntry, modulesEntry] = await Promise.all(
    names.map((name) => entryAt(path.join(dir, name))),
  );
  for (const file of [commondir, config, configWorktree, alternates]) {
    if (file !== null && file !== undefined && file.kind === 'other') oddities.push({ path: file.path, why: 'is not a regular file' });
  }
  for (const file of [commondir, configWorktree, alternates]) {
    if (file?.kind === 'symlink') oddities.push({ path: file.path, why: 'is a symbolic link' });
  }
  if (expectDir(objects ?? null, oddities)) dirs.push(path.join(dir, 'objects'));
  if (expectDir(objectsInfo ?? null, oddities)) dirs.push(path.join(dir, 'objects', 'info'));
  if (hooks?.kind === 'dir') dirs.push(hooks.path);
  const worktrees: WorktreeAdmin[] = [];
  if (expectDir(worktreesEntry ?? null, oddities)) {
    const parent = path.join(dir, 'worktrees');
    dirs.push(parent);
    for (const child of await listDir(parent)) {
      const admin = path.join(parent, child.name);
      if (child.isSymbolicLink()) oddities.push({ path: admin, why: 'is a symbolic link' });
      if (!child.isDirectory() || !budget.take()) continue;
      const adminEntry = await entryAt(admin);
      if (adminEntry?.kind !== 'dir') continue;
      const worktree = await worktreeAdmin(admin, adminEntry, budget, oddities, dirs);
      dirs.push(admin);
      worktrees.push(worktree);
    }
  }
  const modules = depth < MAX_MODULE_DEPTH && expectDir(modulesEntry ?? null, oddities) ? await moduleGitDirs(path.join(dir, 'modules'), budget, depth, oddities, dirs) : [];
  return {
    dir,
    entry,
    commondir: commondir ?? null,
    config: config ?? null,
    configWorktree: configWorktree ?? null,
    hooks: hooks ?? null,
    alternates: alternates ?? null,
    worktrees,
    modules,
    oddities,
    truncated: budget.exceeded,
    dirs,
  };
}

/** Every git dir in the tree: this one, its worktrees' own and its submodules', depth first. */
export function allGitDirs(facts: GitDirFacts): GitDirFacts[] {
  return [
    facts,
    ...facts.worktrees.flatMap((worktree) => [...(worktree.own === null ? [] : allGitDirs(worktree.own)), ...worktree.modules.flatMap(allGitDirs)]),
    ...facts.modules.flatMap(allGitDirs),
  ];
}

/** The submodules' git dirs in the tree (the common dir's and each worktree's), nested ones included. */
export function allModules(facts: GitDirFacts): GitDirFacts[] {
  const own = (gitDir: GitDirFacts): GitDirFacts[] => [...gitDir.modules, ...gitDir.worktrees.flatMap((worktree) => worktree.modules)];
  const found: GitDirFacts[] = [];
  let pending = own(facts);
  while (pending.length > 0) {
    found.push(...pending);
    pending = pending.flatMap(own);
  }
  return found;
}

/** Every oddity in the tree. */
export function allOddities(facts: GitDirFacts): Oddity[] {
  return allGitDirs(facts).flatMap((gitDir) => gitDir.oddities);
}

/** Every directory looked at in the tree. */
export function allDirs(facts: GitDirFacts): string[] {
  return [...new Set(allGitDirs(facts).flatMap((gitDir) => gitDir.dirs))];
}

/** A worktree's `commondir` must lead back to its own repository; git writes `../..`. */
export function commondirLeadsHome(admin: string, text: string | null, commonDir: string): boolean {
  return text !== null && (text === '../..' || text === '../../' || path.resolve(admin, text) === commonDir);
}
