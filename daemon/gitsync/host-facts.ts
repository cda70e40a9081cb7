import path from 'node:path';
import { lstatOrNull } from '../os/untrusted-files.js';
import { gitComplaint, type HostGit } from './host-git.js';
import { isObjectId, isValidRefName, zeroId, type HexLength } from './ref-names.js';

/**
 * What the host's repository says, asked of the host's git (hardened, HostGit): ref values,
 * ancestry, staged changes, gitlinks a commit adds; and whether a work tree holds a repository at a
 * path, read with lstat only.
 */

/** Names per `for-each-ref`: an argv stays short. */
const NAMES_PER_CALL = 200;

/** The host's values of exactly these refs (absent ones are left out). */
export async function hostRefValues(git: HostGit, gitDir: string, names: readonly string[], hexLength: HexLength): Promise<Map<string, string>> {
  const values = new Map<string, string>();
  const wanted = new Set(names);
  for (let at = 0; at < names.length; at += NAMES_PER_CALL) {
    const chunk = names.slice(at, at + NAMES_PER_CALL);
    const result = await git.run({ gitDir }, ['for-each-ref', '--format=%(objectname) %(refname)', '--', ...chunk]);
    if (result.exitCode !== 0) throw new Error(`git for-each-ref failed in ${gitDir}: ${gitComplaint(result)}`);
    for (const line of result.stdout.split('\n')) {
      const space = line.indexOf(' ');
      const oid = line.slice(0, space);
      const name = line.slice(space + 1);
      if (wanted.has(name) && isObjectId(oid, hexLength)) values.set(name, oid);
    }
  }
  return values;
}

export async function isAncestor(git: HostGit, gitDir: string, ancestor: string, descendant: string): Promise<boolean> {
  return (await git.run({ gitDir }, ['merge-base', '--is-ancestor', ancestor, descendant])).exitCode === 0;
}

/** Whether the host's index in `admin` differs from `commit`'s tree: the user staged something there. */
export async function stagedOnHost(git: HostGit, admin: string, workTree: string, commit: string): Promise<boolean> {
  const result = await git.run({ gitDir: admin, workTree }, ['diff-index', '--cached', '--quiet', commit, '--']);
  return result.exitCode !== 0;
}

const GITLINK_MODE = '160000';

/** Paths that are gitlinks in `to` but were not (as gitlinks) in `from`. */
export async function addedGitlinks(git: HostGit, gitDir: string, from: string | null, to: string): Promise<string[]> {
  if (from === null) {
    const listed = await git.run({ gitDir }, ['ls-tree', '-r', '-z', '--full-tree', to]);
    if (listed.exitCode !== 0) throw new Error(`git ls-tree failed in ${gitDir}: ${gitComplaint(listed)}`);
    return listed.stdout
      .split('\0')
      .filter((record) => record.startsWith(`${GITLINK_MODE} `))
      .map((record) => record.slice(record.indexOf('\t') + 1));
  }
  const diff = await git.run({ gitDir }, ['diff-tree', '-r', '-z', '--no-renames', '--no-commit-id', '--ignore-submodules=none', from, to]);
  if (diff.exitCode !== 0) throw new Error(`git diff-tree failed in ${gitDir}: ${gitComplaint(diff)}`);
  const fields = diff.stdout.split('\0');
  const added: string[] = [];
  for (let at = 0; at + 1 < fields.length; at += 2) {
    const [oldMode, newMode] = (fields[at] ?? '').replace(/^:/, '').split(' ');
    const file = fields[at + 1] ?? '';
    if (newMode === GITLINK_MODE && oldMode !== GITLINK_MODE) added.push(file);
  }
  return added;
}

/**
 * Whether `file` (a path git's fsck accepted in a tree) in `workTree` holds a `.git`, or cannot be
 * reached through plain directories: either way the host's git could enter a repository there.
 */
export async function holdsRepository(workTree: string, file: string): Promise<boolean> {
  const parts = file.split('/').filter((part) => part !== '' && part !== '.');
  if (parts.includes('..')) return true;
  let dir = workTree;
  for (const part of parts) {
    const next = path.join(dir, part);
    const stat = await lstatOrNull(next).catch(() => null);
    if (stat === null) return false;
    if (!stat.isDirectory()) return true;
    dir = next;
  }
  return (await lstatOrNull(path.join(dir, '.git')).catch(() => null)) !== null;
}

/** The host fetches the objects of `oids` from the staging repository, checked by fsck; answers the ones that came. */
export async function fetchObjects(git: HostGit, gitDir: string, stage: string, oids: readonly string[]): Promise<{ fetched: Set<string>; complaint: string | null }> {
  const fetch = (wanted: readonly string[]) =>
    git.run({ gitDir }, ['fetch', '--quiet', '--no-tags', '--no-write-fetch-head', '--no-recurse-submodules', '--no-auto-gc', '--no-show-forced-updates', stage, ...wanted]);
  if (oids.length === 0) return { fetched: new Set(), complaint: null };
  const all = await fetch(oids);
  if (all.exitCode === 0) return { fetched: new Set(oids), complaint: null };
  // One bad object fails the whole fetch: each on its own tells which.
  const fetched = new Set<string>();
  let complaint: string | null = gitComplaint(all);
  for (const oid of oids) {
    const one = await fetch([oid]);
    if (one.exitCode === 0) fetched.add(oid);
    else complaint = gitComplaint(one);
  }
  return { fetched, complaint };
}

/**
 * Compare-and-swap of one ref (`from` null: it must not exist yet), with a reflog entry (the
 * stash's reflog is its list, so it gets one too, with the stash's own subject).
 */
export async function updateRef(git: HostGit, gitDir: string, ref: string, to: string, from: string | null, hexLength: HexLength, message: string): Promise<boolean> {
  if (!isValidRefName(ref)) return false;
  let reflog = message;
  if (ref === 'refs/stash') {
    const subject = await git.run({ gitDir }, ['log', '-1', '--format=%s', to, '--']);
    if (subject.exitCode === 0 && subject.stdout !== '') reflog = subject.stdout;
  }
  const result = await git.run({ gitDir }, ['update-ref', '--create-reflog', '-m', reflog, ref, to, from ?? zeroId(hexLength)]);
  return result.exitCode === 0;
}
