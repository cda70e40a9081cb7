import { constants, lstat, promises as fs, readdir, readdirSync, type Dirent, type Stats } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { identity, listDir, lstatSyncOrNull } from '../os/untrusted-files.js';
import type { GitDirPair, GitDirPlace } from './git-dir-pairs.js';
import { isObjectId, isValidRefName } from './ref-names.js';
import { fileIdentity, isSyncedRef, type LooseRef } from './sandbox-refs.js';

/**
 * Copies what git keeps of one host git dir's state into its counterpart in the sandbox's git dir:
 * HEAD and the other state files, refs, packed-refs, reflogs, the index, `info/`, `shallow`, and an
 * operation under way (`rebase-merge/`, `sequencer/`…). Copies, never hard links: a container can
 * open a hard-linked file and write the host's inode in place. Files the sandbox writes (whatever
 * uid it runs as) must stay removable by the daemon, so directories are 0777 and files 0666 inside
 * the state dir, which nobody else can enter. Only regular files and directories are copied; the
 * host's own symbolic links are left out, never followed.
 */

/** Top-level state files git writes in a git dir (HEAD, ORIG_HEAD, MERGE_MSG, BISECT_LOG…). */
const STATE_FILE = /^[A-Z][A-Z_]*$/;
const PLAIN_FILES = new Set(['index', 'packed-refs', 'shallow', 'config.worktree']);
const SHARED_INDEX = /^sharedindex\.[0-9a-f]+$/;
const STATE_DIRS = ['refs', 'logs', 'info', 'rebase-merge', 'rebase-apply', 'sequencer'];
/** A worktree's admin dir names its work tree and its common dir: kept as they are (and read-only in the sandbox). */
const WORKTREE_FILES = new Set(['gitdir', 'commondir']);
const COPY_PARALLEL = 16;
const REF_FILE_MAX_BYTES = 1024;

/** A refresh copies (and a print looks at) at most this many refs, reflogs and state files. */
export const MAX_COPY_ENTRIES = 1_000_000;

export const DIR_MODE = 0o777;
export const FILE_MODE = 0o666;

/** Bounds a refresh: past it the repository is refused (REPOSITORY_UNSUPPORTED), never half copied. */
export class CopyBudget {
  private used = 0;

  constructor(readonly max: number) {}

  take(where: string): void {
    this.used += 1;
    if (this.used > this.max) {
      throw new SandboxdError('REPOSITORY_UNSUPPORTED', `${where}: the repository's git dirs hold more than ${this.max} refs, reflogs and state files, more than sandboxd copies for a sandbox`, {
        remedy: 'Pack its refs (`git pack-refs --all`) and expire old reflogs (`git reflog expire --expire=now --all`) on the host, then retry.',
      });
    }
  }
}

/** What the sandbox's copy started as: the loose refs (with each copy's identity) and the packed-refs copy's identity. */
export interface PairBase {
  loose: Map<string, LooseRef>;
  packed: string | null;
}

/** `mkdir -p` whose every new directory gets DIR_MODE whatever the umask. */
export async function makeDir(dir: string): Promise<void> {
  const first = await fs.mkdir(dir, { recursive: true, mode: DIR_MODE });
  if (first === undefined) {
    await fs.chmod(dir, DIR_MODE);
    return;
  }
  for (let made = dir; made.length >= first.length; made = path.dirname(made)) await fs.chmod(made, DIR_MODE);
}

async function copyFile(from: string, to: string): Promise<void> {
  await fs.copyFile(from, to, constants.COPYFILE_FICLONE);
  await fs.chmod(to, FILE_MODE);
}

/** Runs `work` on each item, a few at a time. */
async function eachLimited<T>(items: readonly T[], work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++];
      if (item !== undefined) await work(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(COPY_PARALLEL, items.length) }, worker));
}

/** A loose ref: written from the host's text, its value kept as the base the sandbox starts from. */
async function copyRef(from: string, to: string, name: string, pair: GitDirPair, base: PairBase): Promise<void> {
  const handle = await fs.open(from, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  let text: string;
  try {
    const stat = await handle.stat();
    if (!stat.isFile() || stat.size > REF_FILE_MAX_BYTES) return;
    text = (await handle.readFile()).toString('utf8');
  } finally {
    await handle.close();
  }
  await fs.writeFile(to, text, { mode: FILE_MODE, flag: 'wx' });
  await fs.chmod(to, FILE_MODE);
  const oid = text.trim();
  if (isSyncedRef(name) && isValidRefName(name) && isObjectId(oid, pair.hexLength)) {
    const identity = await fileIdentity(to);
    if (identity !== null) base.loose.set(name, { oid, identity });
  }
}

/** A directory of state, recursively: directories and regular files only. */
async function copyTree(from: string, to: string, name: string, pair: GitDirPair, base: PairBase, budget: CopyBudget): Promise<void> {
  await makeDir(to);
  const files: string[] = [];
  const dirs: string[] = [];
  for (const child of await listDir(from)) {
    budget.take(from);
    if (child.isDirectory()) dirs.push(child.name);
    else if (child.isFile()) files.push(child.name);
  }
  await eachLimited(files, async (file) => {
    const childName = `${name}/${file}`;
    if (name === 'refs' || name.startsWith('refs/')) await copyRef(path.join(from, file), path.join(to, file), childName, pair, base);
    else await copyFile(path.join(from, file), path.join(to, file));
  });
  for (const dir of dirs) await copyTree(path.join(from, dir), path.join(to, dir), `${name}/${dir}`, pair, base, budget);
}

/** Whether a top-level file of a host git dir is state the copy takes. */
export function keptFile(pair: Pick<GitDirPlace, 'kind'>, name: string): boolean {
  return STATE_FILE.test(name) || PLAIN_FILES.has(name) || SHARED_INDEX.test(name) || (pair.kind === 'worktree' && WORKTREE_FILES.has(name));
}

/**
 * The identities of host files and directories, and the newest change among them: a change made in
 * the same clock tick as the look may leave the same times behind, so a print whose newest change
 * is that recent proves nothing yet. Each line names its file, so the lines are compared as a set
 * (`text()` sorts them): the walk that adds them may look at directories in any order.
 */
export class StatePrint {
  readonly lines: string[] = [];
  newestMs = 0;

  add(file: string, stat: Stats | null): void {
    if (stat === null) {
      this.lines.push(`${file}:-`);
      return;
    }
    this.lines.push(`${file}:${stat.isDirectory() ? 'd' : stat.isFile() ? 'f' : 'o'}:${identity(stat)}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`);
    this.newestMs = Math.max(this.newestMs, stat.mtimeMs, stat.ctimeMs);
  }

  /** Lines another print took (the look worker's), with their newest change. */
  addLooks(looks: { lines: readonly string[]; newestMs: number }): void {
    for (const line of looks.lines) this.lines.push(line);
    this.newestMs = Math.max(this.newestMs, looks.newestMs);
  }

  text(): string {
    return [...this.lines].sort().join('\n');
  }
}

/**
 * `lstat` (null when it fails) and a directory's entries (none when it is not there: listDir's
 * rule) through
 * the callback API: a print looks at every state file of a repository on an acquire's path, and
 * node:fs's promise API costs several times more per call.
 */
export function lstatQuietly(file: string): Promise<Stats | null> {
  return new Promise((resolve) => {
    lstat(file, (error, stat) => {
      resolve(error === null ? stat : null);
    });
  });
}

function listQuietly(dir: string): Promise<Dirent[]> {
  return new Promise((resolve, reject) => {
    readdir(dir, { withFileTypes: true }, (error, entries) => {
      if (error === null) resolve(entries);
      else if (error.code === 'ENOENT' || error.code === 'ENOTDIR') resolve([]);
      else reject(error);
    });
  });
}

/**
 * The identity (device, inode, size, mtime, ctime) of everything copyGitDirState reads of a host
 * git dir: the dir itself and each directory it lists (a file made, renamed or removed there
 * changes its directory), each file it copies (git appends reflogs and writes some state files in
 * place). Taken before a copy, an equal print later proves the copy is still the host's state.
 * Sibling directories are walked at once, each listed while it is looked at: the walk is a chain of
 * file-system round trips as long as the deepest path rather than as the whole tree.
 */
export async function gitDirStatePrint(pair: Pick<GitDirPlace, 'host' | 'kind'>, budget: CopyBudget, print: StatePrint): Promise<void> {
  const stats = async (files: readonly string[]): Promise<(Stats | null)[]> => {
    for (const file of files) budget.take(file);
    const found = await Promise.all(files.map((file) => lstatQuietly(file)));
    files.forEach((file, index) => {
      print.add(file, found[index] ?? null);
    });
    return found;
  };
  // Each directory is listed while it is looked at; what a listing shows counts only where the look
  // found a directory (a link or file put there shows in its line, and its listing is dropped).
  const trees = async (dirs: readonly string[]): Promise<void> => {
    const [found, listings] = await Promise.all([stats(dirs), Promise.all(dirs.map(listQuietly))]);
    await Promise.all(dirs.flatMap((dir, index) => (found[index]?.isDirectory() === true ? [tree(dir, listings[index] ?? [])] : [])));
  };
  const tree = async (dir: string, children: readonly Dirent[]): Promise<void> => {
    await Promise.all([
      stats(children.filter((child) => child.isFile()).map((child) => path.join(dir, child.name))),
      trees(children.filter((child) => child.isDirectory()).map((child) => path.join(dir, child.name))),
    ]);
  };
  // A state file or directory made, renamed or removed in the git dir changes the git dir's own
  // line: only what its listing shows is looked at.
  const [children] = await Promise.all([listQuietly(pair.host), stats([pair.host])]);
  const listed = new Set(children.filter((child) => child.isDirectory()).map((child) => child.name));
  await Promise.all([
    stats(children.filter((child) => child.isFile() && keptFile(pair, child.name)).map((child) => path.join(pair.host, child.name))),
    trees(STATE_DIRS.filter((dir) => listed.has(dir)).map((dir) => path.join(pair.host, dir))),
  ]);
}

/**
 * gitDirStatePrint with synchronous looks, for the daemon's look worker (daemon/os/look-worker.ts)
 * and never its main thread: the same files and directories, the same lines. A listing that fails
 * other than by ENOENT or ENOTDIR throws, as there.
 */
export function gitDirStatePrintSync(pair: Pick<GitDirPlace, 'host' | 'kind'>, budget: CopyBudget, print: StatePrint): void {
  const look = (file: string): Stats | null => {
    budget.take(file);
    // null on any failure, as lstatQuietly
    const stat = lstatSyncOrNull(file);
    print.add(file, stat);
    return stat;
  };
  const list = (dir: string): Dirent[] => {
    try {
      return readdirSync(dir, { withFileTypes: true });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return [];
      throw error;
    }
  };
  // As there, a directory is listed before it is looked at: what the listing shows counts only where the look found a directory.
  const tree = (dir: string): void => {
    const children = list(dir);
    if (look(dir)?.isDirectory() !== true) return;
    for (const child of children) {
      if (child.isFile()) look(path.join(dir, child.name));
      else if (child.isDirectory()) tree(path.join(dir, child.name));
    }
  };
  const children = list(pair.host);
  look(pair.host);
  const listed = new Set(children.filter((child) => child.isDirectory()).map((child) => child.name));
  for (const child of children) if (child.isFile() && keptFile(pair, child.name)) look(path.join(pair.host, child.name));
  for (const dir of STATE_DIRS) if (listed.has(dir)) tree(path.join(pair.host, dir));
}

/**
 * One host git dir's state into `sandbox` (created fresh). Its objects, config and hooks are not
 * copied: objects are read from the host's store through alternates, and config and hooks are the
 * daemon's to write.
 */
export async function copyGitDirState(pair: GitDirPair, sandbox: string, budget: CopyBudget): Promise<PairBase> {
  const base: PairBase = { loose: new Map(), packed: null };
  await makeDir(sandbox);
  const files: string[] = [];
  for (const child of await listDir(pair.host)) {
    if (!child.isFile()) continue;
    if (keptFile(pair, child.name)) {
      budget.take(pair.host);
      files.push(child.name);
    }
  }
  await eachLimited(files, (file) => copyFile(path.join(pair.host, file), path.join(sandbox, file)));
  for (const dir of STATE_DIRS) {
    const from = path.join(pair.host, dir);
    if ((await fs.lstat(from).catch(() => null))?.isDirectory() === true) await copyTree(from, path.join(sandbox, dir), dir, pair, base, budget);
  }
  if (pair.kind !== 'worktree') {
    for (const dir of ['refs/heads', 'refs/tags', 'objects/info', 'objects/pack', 'hooks']) await makeDir(path.join(sandbox, dir));
  }
  base.packed = await fileIdentity(path.join(sandbox, 'packed-refs'));
  return base;
}
