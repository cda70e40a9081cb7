import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../../shared/errors.js';
import { parseConfigText, type ConfigEntry } from './config-parse.js';
import { readControlResult, type ControlRead } from '../../os/untrusted-files.js';
import { allDirs, commondirLeadsHome, allGitDirs, allModules, allOddities, controlText, describeGitDir, entryAt, MAX_GIT_DIRS, type Entry, type GitDirFacts, type Oddity, type WorktreeAdmin } from './git-dir.js';
import type { GitRepo, HooksPath, LinkedWorktree, SubmoduleGitDir } from './git.js';

/**
 * The repository around a workdir, read from the file system the way git's discovery finds it,
 * without asking git: whether protection applies must not depend on a program the repository can
 * make fail (a corrupt HEAD, an include naming a FIFO) or on paths the repository names. Exactly
 * three shapes are recognised: a plain clone (`.git` directory), a linked worktree (a `.git` file
 * naming `<common>/worktrees/<name>`, whose `gitdir` names that `.git` file back and whose
 * `commondir` is `../..`), and a submodule's work tree (a `.git` file naming a git dir under an
 * enclosing repository's `modules/`, itself read by these rules). Anything else is refused with
 * REPOSITORY_UNSAFE, never followed.
 */

/** A repository config larger than this is not one a person wrote. */
export const CONFIG_MAX_BYTES = 1024 * 1024;
const MAX_SUPERPROJECT_DEPTH = 8;
const MAX_INCLUDE_DEPTH = 5;

export function unsafe(file: string, why: string, remedy?: string): SandboxdError {
  return new SandboxdError('REPOSITORY_UNSAFE', `${file} ${why}`, remedy === undefined ? undefined : { remedy });
}

/** The directories git's discovery looks at from `dir` up: where a `.git` appearing changes the answer. */
export function discoveryPath(dir: string): string[] {
  const chain = [dir];
  for (let current = dir; path.dirname(current) !== current; current = path.dirname(current)) chain.push(path.dirname(current));
  return chain;
}

/** What git's discovery would also take for a git dir: HEAD, objects/ and refs/ in one directory. */
async function looksLikeGitDir(dir: string): Promise<boolean> {
  const [head, objects, refs] = await Promise.all(['HEAD', 'objects', 'refs'].map((name) => entryAt(path.join(dir, name))));
  return head !== null && objects?.kind === 'dir' && refs?.kind === 'dir';
}

/** The nearest `.git` at or above `dir`, as git's discovery walks up; the walked dirs come along. */
async function findDotGit(dir: string): Promise<{ top: string; dotGit: Entry; walked: string[] } | null> {
  const walked: string[] = [];
  for (const current of discoveryPath(dir)) {
    walked.push(current);
    const dotGit = await entryAt(path.join(current, '.git'));
    if (dotGit !== null) return { top: current, dotGit, walked };
    if (await looksLikeGitDir(current)) {
      throw unsafe(current, 'is itself a git directory (or a bare repository): the sandbox could write the hooks and config the host runs there', 'Run from a work tree instead of from inside a git directory.');
    }
  }
  return null;
}

/** `gitdir: <path>` of a `.git` file, resolved against the file's directory; null if not that shape. */
export function gitFileTarget(file: string, text: string | null): string | null {
  const match = /^gitdir: (.+)$/.exec(text ?? '');
  const named = match?.[1];
  return named === undefined ? null : path.resolve(path.dirname(file), named);
}

async function realDir(dir: string): Promise<string | null> {
  try {
    return await fs.realpath(dir);
  } catch {
    return null;
  }
}

/** Canonical path of `file`: its directory resolved, its own name kept (never followed). */
async function canonicalFilePath(file: string): Promise<string | null> {
  const dir = await realDir(path.dirname(file));
  return dir === null ? null : path.join(dir, path.basename(file));
}

export async function readConfigEntries(file: Entry | null): Promise<ConfigEntry[]> {
  return file?.kind === 'file' ? configEntriesOf(file.path, await readControlResult(file.path, CONFIG_MAX_BYTES)) : [];
}

/**
 * The entries of the config `file` from its read (this thread's, or the look worker's with the same
 * rules and bound): what readConfigEntries answers, the same refusals.
 */
export function configEntriesOf(file: string, read: ControlRead): ConfigEntry[] {
  if ('error' in read) throw unsafe(file, `cannot be read safely (${read.error})`);
  const parsed = parseConfigText(read.text);
  if (parsed.error !== null) throw unsafe(file, `has a line git cannot read either (line ${parsed.error.line})`, `Fix or remove line ${parsed.error.line} of ${file}.`);
  return parsed.entries;
}

function lastCoreValue(entries: readonly ConfigEntry[], key: string): string | null {
  let found: string | null = null;
  for (const entry of entries) if (entry.section === 'core' && entry.subsection === null && entry.key === key) found = entry.value;
  return found;
}

/** `~/` as git expands it (against the host user's home). */
function expandHome(value: string, hostHome: string): string {
  return value === '~' ? hostHome : value.startsWith('~/') ? path.join(hostHome, value.slice(2)) : value;
}

function inside(file: string, dirs: readonly string[]): boolean {
  return dirs.some((dir) => file === dir || file.startsWith(`${dir}/`));
}

/**
 * A path inside the sandbox's writable mounts is only as fixed as its components: a symbolic link
 * among them can be repointed from the sandbox, and a read-only mount would not follow it there.
 */
async function symlinkBelow(file: string, roots: readonly string[], what: string): Promise<Oddity[]> {
  const root = roots.filter((dir) => inside(file, [dir])).sort((a, b) => b.length - a.length)[0];
  if (root === undefined) return [];
  const parts = path.relative(root, file).split(path.sep).filter((part) => part !== '');
  for (let index = 1; index <= parts.length; index += 1) {
    const component = path.join(root, ...parts.slice(0, index));
    if ((await entryAt(component))?.kind === 'symlink') return [{ path: component, why: `is a symbolic link on the way to ${what} ${file}, which the sandbox could repoint` }];
  }
  return [];
}

/** A worktree's `gitdir` names its work tree's `.git` file; kept only when that file names the admin dir back. */
async function namesBack(named: string | null, admin: string): Promise<string | null> {
  if (named === null || path.basename(named) !== '.git') return null;
  const file = await canonicalFilePath(named);
  if (file === null) return null;
  const entry = await entryAt(file);
  if (entry?.kind !== 'file') return null;
  const target = gitFileTarget(file, await controlText(entry));
  return target !== null && (await realDir(target)) === admin ? file : null;
}

/** What a worktree's `gitdir` names (absolute, or relative to the admin dir with worktree.useRelativePaths). */
function worktreeGitdir(worktree: WorktreeAdmin): string | null {
  return worktree.gitdirText === null || worktree.gitdirText === '' ? null : path.resolve(worktree.admin, worktree.gitdirText);
}

function commondirOk(worktree: WorktreeAdmin, commonDir: string): boolean {
  return commondirLeadsHome(worktree.admin, worktree.commondirText, commonDir);
}

interface Located {
  kind: GitRepo['kind'];
  commonDir: string;
  gitDir: string;
  /** A submodule's outermost superproject (its own common dir otherwise). */
  outer?: GitRepo['outer'];
}

async function locateLinked(top: string, dotGit: Entry, depth: number, hostHome: string): Promise<Located> {
  const target = gitFileTarget(dotGit.path, await controlText(dotGit));
  if (target === null) throw unsafe(dotGit.path, 'is not a `gitdir: <path>` file');
  const named = await entryAt(target);
  const real = named?.kind === 'dir' ? await realDir(target) : null;
  if (real === null) throw unsafe(dotGit.path, `names ${target}, which is ${named?.kind === 'symlink' ? 'a symbolic link' : 'not a directory'}`);
  if (path.basename(path.dirname(target)) === 'worktrees') {
    const commonNamed = path.dirname(path.dirname(target));
    const commonEntry = await entryAt(commonNamed);
    const commonDir = commonEntry?.kind === 'dir' ? await realDir(commonNamed) : null;
    if (commonDir !== null && path.join(commonDir, 'worktrees', path.basename(target)) === real) return { kind: 'worktree', commonDir, gitDir: real };
  }
  if (depth < MAX_SUPERPROJECT_DEPTH && path.dirname(top) !== top) {
    const enclosing = await readRepoLayoutAt(path.dirname(top), hostHome, depth + 1);
    const owned = enclosing === null ? undefined : allModules(enclosing.facts).find((gitDir) => gitDir.dir === real);
    if (enclosing !== null && owned !== undefined) return { kind: 'submodule', commonDir: real, gitDir: real, outer: enclosing.outer };
  }
  throw unsafe(dotGit.path, `names ${target}, which is neither a linked worktree of a repository nor a submodule's git dir of the enclosing repository`, 'Run from the repository itself; sandboxd protects plain clones, linked worktrees and submodules only (not --separate-git-dir layouts).');
}

function refuseOddities(facts: GitDirFacts, commonDir: string): void {
  if (facts.truncated) throw unsafe(facts.dir, `holds more than ${MAX_GIT_DIRS} worktrees and submodules, more than sandboxd protects`);
  const odd = allOddities(facts)[0];
  if (odd !== undefined) throw unsafe(odd.path, odd.why, `Inspect ${odd.path}; if you did not put it there, move it aside (\`mv ${odd.path} ${odd.path}.bak\`).`);
  for (const gitDir of allGitDirs(facts)) {
    if (gitDir.commondir !== null) {
      const what = gitDir.dir === commonDir ? 'the repository' : 'a self-contained git dir';
      throw unsafe(gitDir.commondir.path, `redirects ${what} to another git dir (git never writes one there)`, `Move it aside: \`mv ${gitDir.commondir.path} ${gitDir.commondir.path}.bak\`.`);
    }
    for (const worktree of gitDir.worktrees) {
      if (worktree.commondir !== null && !commondirOk(worktree, gitDir.dir)) {
        throw unsafe(worktree.commondir.path, `points at ${worktree.commondirText ?? 'something unreadable'}, not at its own repository (git writes ../..)`, `Remove the worktree's admin dir if you did not create it: \`rm -r ${worktree.admin}\`.`);
      }
    }
  }
}

async function linkedWorktrees(facts: GitDirFacts): Promise<LinkedWorktree[]> {
  return Promise.all(
    allGitDirs(facts).flatMap((gitDir) =>
      gitDir.worktrees.map(async (worktree) => ({ admin: worktree.admin, dotGit: await namesBack(worktreeGitdir(worktree), worktree.admin) })),
    ),
  );
}

async function submodules(facts: GitDirFacts): Promise<SubmoduleGitDir[]> {
  return Promise.all(
    allModules(facts).map(async (gitDir) => {
      const workTree = lastCoreValue(await readConfigEntries(gitDir.config), 'worktree');
      const real = workTree === null ? null : await realDir(path.resolve(gitDir.dir, workTree));
      const dotGit = real === null ? null : path.join(real, '.git');
      const entry = dotGit === null ? null : await entryAt(dotGit);
      const back = entry?.kind === 'file' ? gitFileTarget(entry.path, await controlText(entry)) : null;
      return { dir: gitDir.dir, workTree: real, dotGit: back !== null && (await realDir(back)) === gitDir.dir ? dotGit : null };
    }),
  );
}

/**
 * Include targets of the repository's config inside the repository, followed as git follows
 * them (any condition). Files outside are the user's (and the global config's business).
 */
async function includeTargets(configFile: Entry | null, hostHome: string, writable: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  let pending: { file: Entry | null; depth: number }[] = [{ file: configFile, depth: 0 }];
  while (pending.length > 0) {
    const next: typeof pending = [];
    for (const { file, depth } of pending) {
      if (file === null || depth >= MAX_INCLUDE_DEPTH) continue;
      for (const entry of await readConfigEntries(file)) {
        const isInclude = (entry.section === 'include' && entry.subsection === null) || (entry.section === 'includeif' && entry.subsection !== null);
        if (!isInclude || entry.key !== 'path' || entry.value === null || entry.value === '') continue;
        const target = path.resolve(path.dirname(file.path), expandHome(entry.value, hostHome));
        if (found.includes(target) || !inside(target, writable)) continue;
        found.push(target);
        next.push({ file: await entryAt(target), depth: depth + 1 });
      }
    }
    pending = next;
  }
  return found;
}

/**
 * `core.hooksPath` values (relative ones run from the top of the work tree, as git's hooks do)
 * that lie inside the repository, each with whether it exists; a symbolic link on the way is one
 * the sandbox could repoint.
 */
async function hooksPathsInside(values: readonly (string | null)[], top: string, writable: readonly string[], hostHome: string): Promise<{ found: HooksPath[]; unguardable: Oddity[] }> {
  const found: HooksPath[] = [];
  const unguardable: Oddity[] = [];
  for (const value of values) {
    if (value === null || value === '') continue;
    const dir = path.resolve(top, expandHome(value, hostHome));
    if (!inside(dir, writable) || found.some((known) => known.path === dir)) continue;
    unguardable.push(...(await symlinkBelow(dir, writable, 'core.hooksPath')));
    found.push({ path: dir, exists: (await entryAt(dir))?.kind === 'dir' });
  }
  return { found, unguardable };
}

/**
 * Adds the effective `core.hooksPath` git reported (from any scope: a global relative one names a
 * directory in every work tree) to what the repository's own config says. Git may only add
 * protection here, never take it away.
 */
export async function withEffectiveHooksPath(repo: GitRepo, value: string | null, hostHome: string): Promise<GitRepo> {
  const extra = await hooksPathsInside([value], repo.topLevel, [repo.topLevel], hostHome);
  const added = extra.found.filter((hooksPath) => !repo.hooksPaths.some((known) => known.path === hooksPath.path));
  if (added.length === 0) return repo;
  return { ...repo, hooksPaths: [...repo.hooksPaths, ...added], unguardable: { ...repo.unguardable, hooks: [...repo.unguardable.hooks, ...extra.unguardable] } };
}

export async function readRepoLayout(cwd: string, hostHome: string): Promise<GitRepo | null> {
  return readRepoLayoutAt(cwd, hostHome, 0);
}

async function readRepoLayoutAt(cwd: string, hostHome: string, depth: number): Promise<GitRepo | null> {
  const found = await findDotGit(cwd);
  if (found === null) return null;
  const { top, dotGit, walked } = found;
  if (dotGit.kind === 'symlink' || dotGit.kind === 'other') {
    throw unsafe(dotGit.path, `is ${dotGit.kind === 'symlink' ? 'a symbolic link' : 'neither a directory nor a file'}`, 'Replace it with the git dir itself, or a `gitdir: <path>` file.');
  }
  const located: Located = dotGit.kind === 'dir' ? { kind: 'plain', commonDir: dotGit.path, gitDir: dotGit.path } : await locateLinked(top, dotGit, depth, hostHome);
  const commonEntry = await entryAt(located.commonDir);
  if (commonEntry?.kind !== 'dir') throw unsafe(located.commonDir, 'is not a directory');
  const facts = await describeGitDir(located.commonDir, commonEntry);
  refuseOddities(facts, located.commonDir);
  if (located.kind === 'worktree') {
    const own = facts.worktrees.find((worktree) => worktree.admin === located.gitDir);
    if (own === undefined || !commondirOk(own, located.commonDir)) throw unsafe(located.gitDir, 'has no `commondir` naming its repository (git writes ../..)');
    if ((await namesBack(worktreeGitdir(own), own.admin)) !== dotGit.path) {
      throw unsafe(path.join(own.admin, 'gitdir'), `does not name ${dotGit.path} back: the worktree is not this repository's`, `Repair it on the host: \`git worktree repair ${top}\`.`);
    }
  }
  // The work tree is what the sandbox writes; its git dirs it never does (the sandbox has its own).
  const writable = [top];
  const includes = await includeTargets(facts.config, hostHome, writable);
  const includeEntries = await Promise.all(includes.map(entryAt));
  const special = includeEntries.find((entry) => entry?.kind === 'other');
  // Git would block on a FIFO (the host's and the daemon's git alike), or open a device.
  if (special !== undefined && special !== null) throw unsafe(special.path, 'is included by the repository config but is not a regular file (a FIFO?): git would block reading it', `Remove it, or the include in ${path.join(located.commonDir, 'config')}.`);
  const hooksValues = await Promise.all([facts.config, ...includeEntries].map(async (file) => lastCoreValue(await readConfigEntries(file), 'hookspath')));
  const hooksPaths = await hooksPathsInside(hooksValues, top, writable, hostHome);
  const unguardable = {
    hooks: hooksPaths.unguardable,
    config: (await Promise.all(includes.map((file) => symlinkBelow(file, writable, 'the config include')))).flat(),
  };
  return {
    topLevel: top,
    gitDir: located.gitDir,
    commonDir: located.commonDir,
    kind: located.kind,
    outer: located.outer ?? { commonDir: located.commonDir, facts },
    dotGit: dotGit.path,
    facts,
    worktrees: await linkedWorktrees(facts),
    submodules: await submodules(facts),
    hooksPaths: hooksPaths.found,
    includes: includes.filter((_, index) => includeEntries[index]?.kind === 'file'),
    // Not there yet: the sandbox could make it.
    pendingIncludes: includes.filter((_, index) => includeEntries[index] === null),
    unguardable,
    watched: [...new Set([...walked, dotGit.path, located.gitDir, ...allDirs(facts), path.join(located.commonDir, 'config')])],
  };
}
