import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import * as z from 'zod/mini';
import { removeFile, writeFileAtomic } from '../os/files.js';
import { LOOKS_HERE, type Looks } from '../os/look-worker.js';
import type { Logger } from '../os/logger.js';
import { readRecordFile } from '../os/record-file.js';
import { ensureSecureDir } from '../os/secure-dir.js';
import { stableHash } from '../os/text.js';
import { FileTooLarge, identity, listDir, lstatOrNull, NotARegularFile, readControlFile } from '../os/untrusted-files.js';
import type { GitDirFacts } from '../plan/git/git-dir.js';
import type { SandboxGitDir } from '../plan/git/git.js';
import { unsafe } from '../plan/git/git-repo.js';
import { containerObjectsPath, gitDirPlaces, hasAlternates, sandboxPath, type GitDirPair, type GitDirPlace } from './git-dir-pairs.js';
import { objectStores, type KnownStore } from './object-stores.js';
import { copyGitDirState, CopyBudget, FILE_MODE, makeDir, MAX_COPY_ENTRIES, type PairBase } from './sandbox-copy.js';
import { hostState, statePrint } from './state-print.js';

/**
 * The sandbox's own git dirs, one per repository (keyed by the host's outer common dir), kept in
 * `<state dir>/git-dirs/<hash of the common dir>/`:
 *
 *   s/          the sandbox's git dir, mounted read-write at the common dir's path
 *   ro/         files the daemon writes and the container sees read-only over s/ (configs,
 *               alternates, worktree pointers) and the empty file laid over host alternates
 *   base/       the packed-refs each git dir of s/ started with (hard links to the daemon's copies)
 *   stage/      the daemon's private bare repositories objects are staged in (never mounted)
 *   trash/      sandbox git dirs set aside to be removed
 *   record.json what a restarted daemon must know: the base refs, the print of the host's state the
 *               copy was made from (taken before the copy read it), whether a session has held it
 *               since it was made (and in which worktrees); removed before its copy is set aside,
 *               written again once the next copy is whole (made ahead) or before a session gets it
 */

/** Directories under refs/ looked at for a fingerprint; a repository with more is always refreshed. */
const MAX_FINGERPRINT_DIRS = 4096;
const CONFIG_MAX_BYTES = 1024 * 1024;
const POINTER_MAX_BYTES = 4096;
/** A copy is made ahead (renew) only of host git dirs whose newest change is older than this (a 1 s timestamp tick, and more). */
export const SETTLE_MS = 2500;

/**
 * Lines the sandbox's copy of a config gets: whatever uid the container writes as (a rootless
 * sub-uid, a rootful root), files and directories git creates there stay readable and removable
 * by the daemon.
 */
export const SANDBOX_CONFIG_LINES = '\n# Added by sandboxd: the daemon reads and removes what the sandbox writes here.\n[core]\n\tsharedRepository = 0666\n';

const LooseEntry = z.tuple([z.string().check(z.maxLength(4096)), z.string().check(z.maxLength(64)), z.string().check(z.maxLength(200))]);
const PairRecord = z.strictObject({
  rel: z.string().check(z.maxLength(4096)),
  host: z.string().check(z.maxLength(4096)),
  kind: z.enum(['common', 'worktree', 'module']),
  hexLength: z.union([z.literal(40), z.literal(64)]),
  loose: z.array(LooseEntry).check(z.maxLength(MAX_COPY_ENTRIES)),
  packed: z.nullable(z.string().check(z.maxLength(200))),
});
export const SandboxRecord = z.strictObject({
  commonDir: z.string().check(z.maxLength(4096)),
  pairs: z.array(PairRecord).check(z.maxLength(4096)),
  hostPrint: z.nullable(z.string()),
  /** A session has held it since it was made: what the sandbox did there is not the host's state. */
  used: z.boolean(),
  /** Worktrees sessions have mounted since the refresh: a killed daemon's sessions may still run there. */
  served: z.array(z.strictObject({ rel: z.string().check(z.maxLength(4096)), admin: z.string().check(z.maxLength(4096)), workTree: z.string().check(z.maxLength(4096)) })).check(z.maxLength(4096)),
  /** The last session's git and PATH: a restarted daemon brings its sessions' work home with them. */
  git: z.optional(z.nullable(z.strictObject({ git: z.string().check(z.maxLength(4096)), path: z.string().check(z.maxLength(65_536)) }))),
});
export type SandboxRecord = z.infer<typeof SandboxRecord>;

/** One git dir of the repository with the state its sandbox copy started from. */
export interface PairState extends GitDirPair {
  base: PairBase;
}

/** A sandbox git dir as it is on disk. */
export interface SandboxState {
  key: string;
  commonDir: string;
  /** The key's directory. */
  dir: string;
  /** The sandbox's git dir (`s/`). */
  root: string;
  pairs: PairState[];
  /**
   * The print (StatePrint) of the host's git dirs taken before the copy was made, when it can prove
   * the copy is still the host's state later (it had settled); null otherwise.
   */
  hostPrint: string | null;
  used: boolean;
  served: { rel: string; admin: string; workTree: string }[];
  /** The host's git (and PATH) the last session found; null before any. */
  git: { git: string; path: string } | null;
  /**
   * Each git dir's object stores as the print just taken with this state found them (by rel): what
   * the plan mounts, without walking them again. Not recorded: a state loaded from its record
   * walks them.
   */
  stores?: Map<string, KnownStore[]>;
}

/** What the plan mounts of a sandbox git dir besides the dir itself. */
export type SandboxFiles = Omit<SandboxGitDir, 'source' | 'target' | 'pins'>;

export function pairOf(record: z.infer<typeof PairRecord>): PairState {
  const loose = new Map(record.loose.map(([name, oid, id]) => [name, { oid, identity: id }]));
  return { rel: record.rel, host: record.host, kind: record.kind, hexLength: record.hexLength, base: { loose, packed: record.packed } };
}

function pairRecord(pair: PairState): z.infer<typeof PairRecord> {
  return {
    rel: pair.rel,
    host: pair.host,
    kind: pair.kind,
    hexLength: pair.hexLength,
    loose: [...pair.base.loose].map(([name, ref]) => [name, ref.oid, ref.identity] as [string, string, string]),
    packed: pair.base.packed,
  };
}

function recordOf(state: SandboxState): SandboxRecord {
  return {
    commonDir: state.commonDir,
    pairs: state.pairs.map(pairRecord),
    hostPrint: state.hostPrint,
    used: state.used,
    served: state.served,
    git: state.git,
  };
}

function statLine(name: string, stat: Awaited<ReturnType<typeof lstatOrNull>>): string {
  return stat === null ? `${name}:-` : `${name}:${identity(stat)}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
}

/**
 * A cheap summary of a git dir's refs and HEAD (HEAD, packed-refs and every directory under refs/:
 * git renames each ref into place, which changes its directory): equal summaries mean the refs are
 * as they were. null when there are too many directories to look at.
 */
export async function fingerprint(gitDirs: readonly string[]): Promise<string | null> {
  const lines: string[] = [];
  let dirs = 0;
  for (const gitDir of gitDirs) {
    lines.push(gitDir);
    for (const name of ['HEAD', 'packed-refs']) lines.push(statLine(name, await lstatOrNull(path.join(gitDir, name)).catch(() => null)));
    let pending = [path.join(gitDir, 'refs')];
    while (pending.length > 0) {
      const next: string[] = [];
      for (const dir of pending) {
        dirs += 1;
        if (dirs > MAX_FINGERPRINT_DIRS) return null;
        lines.push(statLine(dir, await lstatOrNull(dir).catch(() => null)));
        for (const child of await listDir(dir).catch(() => [])) if (child.isDirectory()) next.push(path.join(dir, child.name));
      }
      pending = next;
    }
  }
  return stableHash(lines.join('\n'), 32);
}

export class SandboxStore {
  private readonly root: string;

  /**
   * @param settleMs how long ago the newest change to a host git dir must be for a copy of it to be
   *   proven later: longer than the coarsest timestamp tick of the file systems git dirs live on.
   */
  constructor(
    stateDir: string,
    private readonly logger: Logger,
    private readonly settleMs = SETTLE_MS,
    /** Where the host's git dirs are looked at for a print (the daemon's look worker). */
    private readonly looks: Looks = LOOKS_HERE,
  ) {
    this.root = path.join(stateDir, 'git-dirs');
  }

  keyOf(commonDir: string): string {
    return stableHash(commonDir, 20);
  }

  dirOf(key: string): string {
    return path.join(this.root, key);
  }

  /** The records a previous daemon left (each key's record.json). */
  async loadAll(): Promise<SandboxState[]> {
    const states: SandboxState[] = [];
    for (const child of await listDir(this.root).catch(() => [])) {
      if (!child.isDirectory()) continue;
      const dir = path.join(this.root, child.name);
      const [record] = await readRecordFile(path.join(dir, 'record.json'), 'sandboxes', 1, SandboxRecord, this.logger);
      if (record === undefined || this.keyOf(record.commonDir) !== child.name) continue;
      states.push({ key: child.name, commonDir: record.commonDir, dir, root: path.join(dir, 's'), pairs: record.pairs.map(pairOf), hostPrint: record.hostPrint, used: record.used, served: record.served, git: record.git ?? null });
    }
    return states;
  }

  async save(state: SandboxState): Promise<void> {
    await writeFileAtomic(path.join(state.dir, 'record.json'), `${JSON.stringify({ version: 1, sandboxes: [recordOf(state)] })}\n`, 0o600, { durable: false });
  }

  /**
   * Whether a copy no session has held (one made ahead, or one every acquire on failed before its
   * answer) is still the host's state: the same git dirs, and everything the copy read as it was
   * before the copy (a ref moved, a reflog appended, a state file, `info/` or a config edited all
   * show).
   */
  async stillHost(state: SandboxState, facts: GitDirFacts): Promise<boolean> {
    if (state.used || state.hostPrint === null) return false;
    const places = gitDirPlaces(facts);
    if (!samePlaces(places, state.pairs)) return false;
    // The configs the recorded object formats were read from (each common and module git dir's
    // `config`) are in the print, which was taken settled: an equal print proves them unchanged
    // (one changed since, to reftable say, is a different print), so they are not read again.
    const { print } = await statePrint(places, [], this.looks);
    if (print === null || print.print !== state.hostPrint) return false;
    state.stores = print.stores;
    return true;
  }

  /**
   * A fresh sandbox git dir for the repository whose outer common dir `facts` describes: the old one
   * set aside (whatever uid wrote it: the rename is in the daemon's own directory), then the host's
   * state copied in, the daemon's read-only files written, the base the sandbox starts from kept.
   * The print of what the copy reads is taken first; it proves the copy later only if the host had
   * settled (see renew). The record is the caller's to save, before a session gets it.
   */
  async refresh(commonDir: string, facts: GitDirFacts): Promise<SandboxState> {
    const dir = await this.keyDir(commonDir);
    const started = Date.now();
    // The git dirs are known (a repository sandboxd refuses, refused) before the old copy is set aside.
    const { pairs: hostPairs, print } = await hostState(facts, this.looks);
    await this.setAside(dir);
    const pairs = await this.copyIn(dir, hostPairs);
    const settled = print !== null && print.newestMs < started - this.settleMs;
    return this.finish(commonDir, pairs, settled ? print.print : null, print?.stores);
  }

  /**
   * The next acquire's fresh copy, made in place once no session holds the repository (its last
   * sync done: what was worth keeping of the old copy is home): the host printed first, so a change
   * during or after the copy shows when the acquire proves it (stillHost); the record goes before
   * the old copy is set aside and is written, with `used: false` and that print, once the new one
   * is whole, so a daemon killed in between finds no record and copies afresh. None (null, nothing
   * touched) when the host changed within settleMs: a change in the same timestamp tick could leave
   * no trace. Until a session's answer only the daemon writes there: no container has it.
   */
  async renew(commonDir: string, facts: GitDirFacts): Promise<SandboxState | null> {
    const dir = await this.keyDir(commonDir);
    // What acquires and the last renewal set aside is removed here, off their path.
    await this.emptyTrash(path.join(dir, 'trash'));
    const started = Date.now();
    const { pairs: hostPairs, print } = await hostState(facts, this.looks);
    if (print === null || print.newestMs >= started - this.settleMs) return null;
    await removeFile(path.join(dir, 'record.json'));
    await this.setAside(dir);
    const state = this.finish(commonDir, await this.copyIn(dir, hostPairs), print.print, print.stores);
    await this.save(state);
    return state;
  }

  /** The host's state copied into the key dir's s/, its base kept and the daemon's read-only files written. */
  private async copyIn(dir: string, hostPairs: readonly GitDirPair[]): Promise<PairState[]> {
    const root = path.join(dir, 's');
    const pairs = await copyPairs(hostPairs, root);
    await keepBase(root, path.join(dir, 'base'), pairs);
    await this.writeDaemonFiles(path.join(dir, 'ro'), root, pairs);
    return pairs;
  }

  /** The spare/ directories a previous daemon version made its copies ahead in go with the trash. */
  async discardSpares(): Promise<void> {
    for (const child of await listDir(this.root).catch(() => [])) {
      const spare = path.join(this.root, child.name, 'spare');
      if (!child.isDirectory() || (await lstatOrNull(spare).catch(() => null)) === null) continue;
      const trash = await makeTrash(path.dirname(spare));
      await fs.rename(spare, path.join(trash, `spare-${Date.now()}-${randomBytes(4).toString('hex')}`));
    }
  }

  private async keyDir(commonDir: string): Promise<string> {
    await ensureSecureDir(this.root);
    const dir = this.dirOf(this.keyOf(commonDir));
    await ensureSecureDir(dir);
    return dir;
  }

  /**
   * A copy in place at s/ (with its base/ and ro/). A refresh's is not yet recorded: the session
   * that holds it saves its record once, before it answers (a daemon killed before that finds no
   * record and copies afresh).
   */
  private finish(commonDir: string, pairs: PairState[], hostPrint: string | null, stores: Map<string, KnownStore[]> | undefined): SandboxState {
    const key = this.keyOf(commonDir);
    const dir = this.dirOf(key);
    return { key, commonDir, dir, root: path.join(dir, 's'), pairs, hostPrint, used: false, served: [], git: null, ...(stores === undefined ? {} : { stores }) };
  }

  /**
   * The files the plan mounts for `state` (written by refresh), each git dir looked at at once. Which
   * of them exist is read from one listing of ro/, which only the daemon writes. The object stores
   * are the ones the print taken with the state found, or walked when it has none.
   */
  async mountFiles(state: SandboxState): Promise<SandboxFiles> {
    const ro = path.join(state.dir, 'ro');
    const written = new Set((await listDir(ro)).map((entry) => entry.name));
    const looks = await Promise.all(
      state.pairs.map(async (pair) => {
        const at = (name: string) => path.join(state.commonDir, pair.rel, name);
        const file = (name: string) => `${stableHash(pair.rel, 16)}.${name}`;
        const source = (name: string) => path.join(ro, file(name));
        const files: SandboxFiles['files'] = [];
        if (pair.kind === 'worktree') {
          for (const name of ['gitdir', 'commondir', 'config.worktree']) if (written.has(file(name))) files.push({ source: source(name), target: at(name), kind: name === 'config.worktree' ? 'config' : 'pointer' });
          return { files, hooks: [], stores: [] };
        }
        const stores = await (state.stores?.get(pair.rel) ?? storesOf(pair));
        // A submodule's config is the sandbox's to write (`git submodule update` sets its core.worktree
        // each time); the host never reads it. The repository's own stays read-only unless asked.
        if (pair.kind === 'common') files.push({ source: source('config'), target: at('config'), kind: 'config' });
        if (written.has(file('config.worktree'))) files.push({ source: source('config.worktree'), target: at('config.worktree'), kind: 'config' });
        files.push({ source: source('alternates'), target: at('objects/info/alternates'), kind: 'alternates' });
        return { files, hooks: [at('hooks')], stores };
      }),
    );
    const objects = new Map<string, string>();
    const covered = new Set<string>();
    for (const { store, alternates } of looks.flatMap((look) => look.stores)) {
      objects.set(store, containerObjectsPath(store));
      if (alternates) covered.add(path.posix.join(containerObjectsPath(store), 'info', 'alternates'));
    }
    return {
      files: looks.flatMap((look) => look.files),
      hooks: looks.flatMap((look) => look.hooks),
      objects: [...objects].map(([source, target]) => ({ source, target })),
      coveredAlternates: [...covered],
      emptyFile: path.join(ro, 'empty'),
    };
  }

  /** The base packed-refs of a pair (a hard link to what refresh copied), for comparing with the sandbox's. */
  basePackedRefs(state: SandboxState, pair: Pick<GitDirPair, 'rel'>): string {
    return path.join(state.dir, 'base', `${stableHash(pair.rel, 16)}.packed-refs`);
  }

  stageDir(state: SandboxState, pair: Pick<GitDirPair, 'rel'>): string {
    return path.join(state.dir, 'stage', `${stableHash(pair.rel, 16)}.git`);
  }

  /**
   * Sets the sandbox git dir aside, with its record (which describes it, not the copy that comes
   * next). What was set aside is removed later, off an acquire's path: by the next renewal or the
   * next daemon's start (emptyTrash).
   */
  private async setAside(dir: string): Promise<void> {
    const trash = await makeTrash(dir);
    const aside = async (name: string): Promise<void> => {
      try {
        await fs.rename(path.join(dir, name), path.join(trash, `${name}-${Date.now()}-${randomBytes(4).toString('hex')}`));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    };
    await Promise.all([removeFile(path.join(dir, 'record.json')), ...['s', 'stage', 'base', 'ro'].map(aside)]);
  }

  /** What every repository's acquires set aside, removed (the start of a daemon). */
  async emptyAllTrash(): Promise<void> {
    for (const child of await listDir(this.root).catch(() => [])) if (child.isDirectory()) await this.emptyTrash(path.join(this.root, child.name, 'trash'));
  }

  /**
   * Removes what was set aside; what cannot be removed (a container's uid made it unwritable to the
   * daemon) stays in trash/ with a log line saying how to remove it.
   */
  private async emptyTrash(trash: string): Promise<void> {
    for (const child of await listDir(trash).catch(() => [])) {
      const full = path.join(trash, child.name);
      try {
        await fs.rm(full, { recursive: true, force: true, maxRetries: 2 });
      } catch (error) {
        this.logger.warn(
          { module: 'gitsync', path: full, err: error },
          `a sandbox's old git dir could not be removed (files a container wrote as another uid); remove it by hand: \`sudo rm -rf ${full}\`, or for rootless Podman \`podman unshare rm -rf ${full}\``,
        );
      }
    }
  }

  private async writeDaemonFiles(ro: string, root: string, pairs: readonly GitDirPair[]): Promise<void> {
    await fs.rm(ro, { recursive: true, force: true });
    await fs.mkdir(ro, { recursive: true, mode: 0o755 });
    await fs.chmod(ro, 0o755);
    const write = async (file: string, text: string, mode: number): Promise<void> => {
      await writeFileAtomic(file, text, mode, { durable: false });
      await fs.chmod(file, mode);
    };
    await write(path.join(ro, 'empty'), '', 0o444);
    for (const pair of pairs) {
      const sandbox = sandboxPath(root, pair);
      const ro1 = (name: string) => path.join(ro, `${stableHash(pair.rel, 16)}.${name}`);
      // Both places: the read-only copy the plan mounts, and the same text at its target in the
      // sandbox's git dir (what a session whose config is writable starts from).
      const both = async (name: string, text: string, target = name): Promise<void> => {
        await write(ro1(name), text, 0o444);
        await write(path.join(sandbox, target), text, FILE_MODE);
      };
      const hostText = async (name: string, max: number): Promise<string | null> => {
        const file = path.join(pair.host, name);
        try {
          return await readControlFile(file, max);
        } catch (error) {
          // Absent, or not a regular file (the host's own links are left out, as the copy leaves
          // them): none. A read that failed is no answer: a sandbox without the host's config or
          // pointers would be wrong, not smaller.
          if (absentOrNotRegular(error)) return null;
          throw unsafe(file, `cannot be read safely (${(error as Error).message})`);
        }
      };
      const worktreeConfig = await hostText('config.worktree', CONFIG_MAX_BYTES);
      if (worktreeConfig !== null) await both('config.worktree', worktreeConfig);
      if (pair.kind === 'worktree') {
        for (const name of ['gitdir', 'commondir']) {
          const text = await hostText(name, POINTER_MAX_BYTES);
          if (text !== null) await both(name, text);
        }
        continue;
      }
      await both('config', `${(await hostText('config', CONFIG_MAX_BYTES)) ?? ''}${SANDBOX_CONFIG_LINES}`);
      const stores = await objectStores(path.join(pair.host, 'objects'));
      await makeDir(path.join(sandbox, 'objects', 'info'));
      await both('alternates', stores.map((store) => `${containerObjectsPath(store)}\n`).join(''), path.join('objects', 'info', 'alternates'));
    }
  }

}

function absentOrNotRegular(error: unknown): boolean {
  if (error instanceof NotARegularFile) return !(error instanceof FileTooLarge);
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Each host git dir's state copied into the sandbox git dir `root`, within one budget. */
async function copyPairs(pairs: readonly GitDirPair[], root: string): Promise<PairState[]> {
  const budget = new CopyBudget(MAX_COPY_ENTRIES);
  const states: PairState[] = [];
  for (const pair of pairs) states.push({ ...pair, base: await copyGitDirState(pair, sandboxPath(root, pair), budget) });
  return states;
}

/** Hard links (the daemon's own copies, which the sandbox replaces by rename) of each pair's packed-refs, in `base`. */
async function keepBase(root: string, base: string, pairs: readonly PairState[]): Promise<void> {
  await fs.mkdir(base, { recursive: true, mode: 0o700 });
  for (const pair of pairs) {
    if (pair.base.packed === null) continue;
    await fs.link(path.join(sandboxPath(root, pair), 'packed-refs'), path.join(base, `${stableHash(pair.rel, 16)}.packed-refs`));
  }
}

/** The key dir's trash/, made if it is not there. */
async function makeTrash(dir: string): Promise<string> {
  const trash = path.join(dir, 'trash');
  await fs.mkdir(trash, { recursive: true, mode: 0o700 });
  return trash;
}

/** The same git dirs, in the same order (their object formats are the print's to prove). */
function samePlaces(a: readonly GitDirPlace[], b: readonly GitDirPair[]): boolean {
  return a.length === b.length && a.every((place, index) => samePlace(place, b[index]));
}

function samePlace(a: GitDirPlace, b: GitDirPair | undefined): boolean {
  return b !== undefined && a.rel === b.rel && a.host === b.host && a.kind === b.kind;
}

/** A host object store and the stores its alternates name, each with whether it names alternates of its own. */
async function storesOf(pair: GitDirPair): Promise<KnownStore[]> {
  const dirs = await objectStores(path.join(pair.host, 'objects'));
  return Promise.all(dirs.map(async (store) => ({ store, alternates: await hasAlternates(store) })));
}
