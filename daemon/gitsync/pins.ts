import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { lstatOrNull, identity } from '../os/untrusted-files.js';
import { allModules, controlText, entryAt } from '../plan/git/git-dir.js';
import { gitFileTarget } from '../plan/git/git-repo.js';
import type { GitRepo, WorkTreePins } from '../plan/git/git.js';
import { gitComplaint, type HostGit } from './host-git.js';

/**
 * What in the work tree the host's git follows into a repository, held in place: every gitlink in
 * the host's index (nested submodules' too) and every `.git` file of a worktree or submodule in the
 * work tree. A container can rename a directory that holds a mount point (only the mount point
 * itself is busy), so each such path is pinned with every directory between the work tree's top and
 * it as a mount point of its own; the `.git` file is read-only; an unpopulated submodule's
 * directory gets an empty read-only directory over it, which the sandbox cannot fill. What cannot
 * be held this way (a submodule whose git dir lies in the work tree, a symbolic link on the way)
 * refuses the session.
 */

/** Submodules pinned per session; past it the session is refused (each costs mounts). */
export const MAX_GITLINKS = 256;
/** Mount points the pins may take in all. */
export const MAX_PIN_MOUNTS = 1024;
/** The host's index, listed in full to find its gitlinks. */
const LS_FILES_MAX_BYTES = 512 * 1024 * 1024;
const MAX_NESTING = 8;

function refuse(file: string, why: string, remedy: string): SandboxdError {
  return new SandboxdError('REPOSITORY_UNSUPPORTED', `${file} ${why}`, { remedy });
}

class PinSet implements WorkTreePins {
  readonly selfBinds: string[] = [];
  readonly readOnly: string[] = [];
  readonly empty: string[] = [];
  private gitlinks = 0;

  constructor(private readonly top: string) {}

  private count(): void {
    if (this.selfBinds.length + this.readOnly.length + this.empty.length > MAX_PIN_MOUNTS) {
      throw refuse(this.top, `needs more than ${MAX_PIN_MOUNTS} mounts to hold its submodules' paths in place`, 'Run the session in a work tree with fewer submodules, or deinit the ones the agent does not need (`git submodule deinit PATH`).');
    }
  }

  gitlink(): void {
    this.gitlinks += 1;
    if (this.gitlinks > MAX_GITLINKS) {
      throw refuse(this.top, `has more than ${MAX_GITLINKS} submodules (gitlinks in the index), more than sandboxd holds in place`, 'Deinit the submodules the agent does not need (`git submodule deinit PATH`), or run the session in a subdirectory that is its own repository.');
    }
  }

  selfBind(dir: string): void {
    if (!this.selfBinds.includes(dir)) {
      this.selfBinds.push(dir);
      this.count();
    }
  }

  add(kind: 'readOnly' | 'empty', target: string): void {
    if (!this[kind].includes(target)) {
      this[kind].push(target);
      this.count();
    }
  }
}

/**
 * Pins every directory from `top` (exclusive) down to `file`'s directory; answers false when one
 * is missing (an empty read-only directory is laid there instead, so nothing can be made there).
 */
async function pinAncestors(top: string, file: string, pins: PinSet, what: string): Promise<boolean> {
  const parts = path.relative(top, path.dirname(file)).split(path.sep).filter((part) => part !== '');
  let dir = top;
  for (const part of parts) {
    dir = path.join(dir, part);
    const stat = await lstatOrNull(dir);
    if (stat === null) {
      pins.add('empty', dir);
      return false;
    }
    if (!stat.isDirectory()) throw refuse(dir, `is ${stat.isSymbolicLink() ? 'a symbolic link' : 'not a directory'} on the way to ${what}`, `Make ${dir} the plain directory git expects (or remove ${what} from the index on the host).`);
    pins.selfBind(dir);
  }
  return true;
}

/** The gitlinks of a git dir's index (paths relative to its work tree), asked of the host's git. */
async function indexGitlinks(git: HostGit, gitDir: string, workTree: string): Promise<string[]> {
  const listed = await git.run({ gitDir, workTree }, ['ls-files', '--stage', '-z'], undefined, LS_FILES_MAX_BYTES);
  if (listed.exitCode !== 0) throw refuse(path.join(gitDir, 'index'), `could not be read by git (${gitComplaint(listed)})`, 'Run `git status` in the repository on the host to see why, and fix it.');
  const links: string[] = [];
  for (const record of listed.stdout.split('\0')) if (record.startsWith('160000 ')) links.push(record.slice(record.indexOf('\t') + 1));
  return links;
}

async function realDir(dir: string): Promise<string | null> {
  return fs.realpath(dir).catch(() => null);
}

/** One submodule path of `workTree` (its index lists it as a gitlink) and, when populated, its own submodules. */
async function pinGitlink(git: HostGit, workTree: string, link: string, modules: ReadonlySet<string>, pins: PinSet, depth: number): Promise<void> {
  const full = path.resolve(workTree, link);
  if (full !== workTree && !full.startsWith(`${workTree}/`)) return;
  pins.gitlink();
  const what = `the submodule ${full}`;
  if (!(await pinAncestors(workTree, full, pins, what))) return;
  const stat = await lstatOrNull(full);
  if (stat === null) {
    pins.add('empty', full);
    return;
  }
  if (stat.isSymbolicLink()) throw refuse(full, 'is a symbolic link where the index has a submodule', `Replace it with the submodule's directory on the host (\`git submodule update --init ${link}\`).`);
  if (!stat.isDirectory()) {
    // A file where the index has a submodule: it stays, and nothing can take its place.
    pins.add('readOnly', full);
    return;
  }
  const dotGit = await entryAt(path.join(full, '.git'));
  if (dotGit === null) {
    pins.add('empty', full);
    return;
  }
  if (dotGit.kind === 'dir') {
    throw refuse(dotGit.path, "is a submodule's git dir inside the work tree, where the sandbox could write its config and hooks", 'Move it under the repository\'s git dir on the host: `git submodule absorbgitdirs`.');
  }
  const target = dotGit.kind === 'file' ? gitFileTarget(dotGit.path, await controlText(dotGit)) : null;
  const gitDir = target === null ? null : await realDir(target);
  if (gitDir === null || !modules.has(gitDir)) {
    throw refuse(dotGit.path, `names ${target ?? 'nothing git reads'}, which is not a submodule git dir of this repository`, `Repair the submodule on the host (\`git submodule absorbgitdirs\`, or remove ${dotGit.path} and run \`git submodule update --init ${link}\`).`);
  }
  pins.selfBind(full);
  pins.add('readOnly', dotGit.path);
  if (depth >= MAX_NESTING) return;
  for (const nested of await indexGitlinks(git, gitDir, full)) await pinGitlink(git, full, nested, modules, pins, depth + 1);
}

/** A cheap summary of the indexes the pins came from and the paths they hold: equal means the pins still hold. */
export async function indexPrint(gitDirs: readonly string[], paths: readonly string[]): Promise<string> {
  // Every stat at once: this is on each acquire's path in a repository.
  const parts = await Promise.all(
    [...gitDirs.map((gitDir) => path.join(gitDir, 'index')), ...paths].map(async (file) => {
      const stat = await lstatOrNull(file).catch(() => null);
      return stat === null ? '-' : `${identity(stat)}:${stat.size}:${stat.mtimeMs}`;
    }),
  );
  return parts.join('|');
}

/** The pins of the session's work tree: its gitlinks (nested too) and the `.git` files of worktrees and submodules in it. */
export async function workTreePins(repo: GitRepo, git: HostGit): Promise<WorkTreePins> {
  const top = repo.topLevel;
  const pins = new PinSet(top);
  const modules = new Set(allModules(repo.outer.facts).map((module) => module.dir));
  for (const link of await indexGitlinks(git, repo.gitDir, top)) await pinGitlink(git, top, link, modules, pins, 0);
  for (const linked of [...repo.worktrees, ...repo.submodules]) {
    if (linked.dotGit === null || !linked.dotGit.startsWith(`${top}/`)) continue;
    if (await pinAncestors(top, linked.dotGit, pins, `the git link ${linked.dotGit}`)) pins.add('readOnly', linked.dotGit);
  }
  return pins;
}
