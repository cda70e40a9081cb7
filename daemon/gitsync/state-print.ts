import path from 'node:path';
import { lstatOrNull } from '../os/untrusted-files.js';
import { stableHash } from '../os/text.js';
import { objectStores, type GitDirPlace } from './git-dir-pairs.js';
import { CopyBudget, gitDirStatePrint, keptFile, MAX_COPY_ENTRIES, StatePrint } from './sandbox-copy.js';

/** A host object store the plan mounts read-only, and whether it names alternates of its own. */
export interface KnownStore {
  store: string;
  alternates: boolean;
}

/**
 * The host files writeDaemonFiles reads besides the object stores, of a git dir of each kind; those
 * the copy takes too (config.worktree, a worktree's gitdir and commondir) are in its print already.
 */
const DAEMON_FILE_INPUTS = { common: ['config', 'config.worktree'], module: ['config', 'config.worktree'], worktree: ['config.worktree', 'gitdir', 'commondir'] } as const;

/**
 * The print of everything the copy and the daemon's files read of the host's git dirs (and when the
 * newest of them changed); null past the copy's bound (never proven).
 */
export async function statePrint(pairs: readonly GitDirPlace[]): Promise<{ print: string; newestMs: number; stores: Map<string, KnownStore[]> } | null> {
  const budget = new CopyBudget(MAX_COPY_ENTRIES);
  const stores = new Map<string, KnownStore[]>();
  const pairPrint = async (pair: GitDirPlace): Promise<{ text: string; newestMs: number }> => {
    const print = new StatePrint();
    // What the daemon's read-only files are written from: configs, pointers, the object stores and their alternates.
    const inputs = async (): Promise<void> => {
      const files = DAEMON_FILE_INPUTS[pair.kind].filter((name) => !keptFile(pair, name)).map((name) => path.join(pair.host, name));
      const found = await Promise.all(files.map((file) => lstatOrNull(file).catch(() => null)));
      files.forEach((file, index) => {
        print.add(file, found[index] ?? null);
      });
      if (pair.kind === 'worktree') return;
      const dirs = await objectStores(path.join(pair.host, 'objects'));
      const alternates = dirs.map((store) => path.join(store, 'info', 'alternates'));
      const named = await Promise.all(alternates.map((file) => lstatOrNull(file).catch(() => null)));
      alternates.forEach((file, index) => {
        print.add(file, named[index] ?? null);
      });
      stores.set(
        pair.rel,
        dirs.map((store, index) => ({ store, alternates: named[index] !== null })),
      );
    };
    await Promise.all([gitDirStatePrint(pair, budget, print), inputs()]);
    // The object format is not in it: read from the config (whose identity is), it is compared with each pair's.
    const header = `${pair.rel}\0${pair.host}\0${pair.kind}\0${(stores.get(pair.rel) ?? []).map((known) => known.store).join('\0')}`;
    return { text: `${header}\n${print.text()}`, newestMs: print.newestMs };
  };
  try {
    const prints = await Promise.all(pairs.map(pairPrint));
    return { print: stableHash(prints.map((print) => print.text).join('\n'), 32), newestMs: Math.max(0, ...prints.map((print) => print.newestMs)), stores };
  } catch {
    return null;
  }
}
