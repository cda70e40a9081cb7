import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { stableHash } from '../os/text.js';
import type { ConfigEntry } from '../plan/git/config-parse.js';
import type { Entry, GitDirFacts } from '../plan/git/git-dir.js';
import { readConfigEntries } from '../plan/git/git-repo.js';
import type { HexLength } from './ref-names.js';

/**
 * The git dirs of one repository (its common dir, each linked worktree's admin dir, each
 * submodule's git dir, nested ones too) and where each one's counterpart lies in the sandbox's git
 * dir, which the container sees at the common dir's own path: a submodule's `.git` file that names
 * `<common>/modules/lib` finds `<sandbox>/modules/lib` there.
 */
export interface GitDirPair {
  /** Relative to the common dir ('' for the common dir itself). */
  rel: string;
  /** The host's git dir. */
  host: string;
  kind: 'common' | 'worktree' | 'module';
  /** Hex digits of the repository's object ids (`extensions.objectFormat`). */
  hexLength: HexLength;
}

/** Where the container reads a host object store: never at its own path, which the sandbox's git dir may cover. */
export const CONTAINER_OBJECTS_ROOT = '/run/sandboxd/git/objects';

export function containerObjectsPath(store: string): string {
  return path.posix.join(CONTAINER_OBJECTS_ROOT, stableHash(store, 16));
}

/** A pair's git dir in the sandbox's git dir `sandboxRoot`. */
export function sandboxPath(sandboxRoot: string, pair: Pick<GitDirPair, 'rel'>): string {
  return pair.rel === '' ? sandboxRoot : path.join(sandboxRoot, pair.rel);
}

function lastValue(entries: readonly ConfigEntry[], section: string, key: string): string | null {
  let value: string | null = null;
  for (const entry of entries) if (entry.section === section && entry.subsection === null && entry.key === key) value = entry.value;
  return value;
}

/**
 * What git 2.39 cannot do, refused rather than half served: a reftable repository (its refs are not
 * files the daemon can copy and read).
 */
async function hexLengthOf(facts: GitDirFacts, entriesOf: ConfigReader): Promise<HexLength> {
  const entries = await entriesOf(facts.config);
  const storage = lastValue(entries, 'extensions', 'refstorage');
  if (storage !== null && storage.toLowerCase() !== 'files') {
    throw new SandboxdError('REPOSITORY_UNSUPPORTED', `${facts.dir} keeps its refs in ${storage} (extensions.refStorage), which sandboxd cannot give a sandbox a copy of`, {
      remedy: 'Run the session in a clone that keeps its refs in files (`git clone --ref-format=files …`, the default).',
    });
  }
  return lastValue(entries, 'extensions', 'objectformat')?.toLowerCase() === 'sha256' ? 64 : 40;
}

/** Where one of the repository's git dirs lies, known from the layout alone (its object format needs its config read). */
export type GitDirPlace = Omit<GitDirPair, 'hexLength'>;

/** Each git dir of the repository, the common dir first, with the git dir whose config names its object format. */
function placesOf(facts: GitDirFacts): { place: GitDirPlace; format: GitDirFacts }[] {
  const found: { place: GitDirPlace; format: GitDirFacts }[] = [];
  const visit = (gitDir: GitDirFacts, kind: 'common' | 'module'): void => {
    found.push({ place: { rel: path.relative(facts.dir, gitDir.dir), host: gitDir.dir, kind }, format: gitDir });
    for (const worktree of gitDir.worktrees) {
      if (worktree.own !== null) continue;
      found.push({ place: { rel: path.relative(facts.dir, worktree.admin), host: worktree.admin, kind: 'worktree' }, format: gitDir });
      for (const module of worktree.modules) visit(module, 'module');
    }
    for (const module of gitDir.modules) visit(module, 'module');
  };
  visit(facts, 'common');
  return found;
}

/**
 * Every git dir of the repository whose common dir `facts` describes, in gitDirPairs' order, without
 * reading anything: what a print of the host's state needs to start.
 */
export function gitDirPlaces(facts: GitDirFacts): GitDirPlace[] {
  return placesOf(facts).map(({ place }) => place);
}

/** The entries of a git dir's config (readConfigEntries, or a read the look worker made by its rules). */
export type ConfigReader = (file: Entry | null) => Promise<ConfigEntry[]>;

/** The configs gitDirPairs reads of the repository whose common dir `facts` describes (those that are files), each once. */
export function gitDirConfigs(facts: GitDirFacts): string[] {
  return [...new Set(placesOf(facts).flatMap(({ format }) => (format.config?.kind === 'file' ? [format.config.path] : [])))];
}

/** Every git dir of the repository whose common dir `facts` describes, the common dir first; each config read once, all at once. */
export async function gitDirPairs(facts: GitDirFacts, entriesOf: ConfigReader = readConfigEntries): Promise<GitDirPair[]> {
  const formats = new Map<GitDirFacts, Promise<HexLength>>();
  const formatOf = (gitDir: GitDirFacts): Promise<HexLength> => {
    const known = formats.get(gitDir);
    if (known !== undefined) return known;
    const length = hexLengthOf(gitDir, entriesOf);
    formats.set(gitDir, length);
    return length;
  };
  return Promise.all(placesOf(facts).map(async ({ place, format }) => ({ ...place, hexLength: await formatOf(format) })));
}

/** Whether a host store names alternates of its own: the container's view of it gets an empty one laid over. */
export async function hasAlternates(store: string): Promise<boolean> {
  return (await fs.lstat(path.join(store, 'info', 'alternates')).catch(() => null)) !== null;
}
