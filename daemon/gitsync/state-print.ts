import path from 'node:path';
import { LOOKS_HERE, type Looks, type PairLookRequest, type PairLooks } from '../os/look-worker.js';
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
 * newest of them changed); null past the copy's bound (`max` looks: never proven). The state walks
 * and the files beside them are the most looks: `looks` makes them off the main thread when it can.
 * The object stores are found here meanwhile (their alternates files are read, not only looked at).
 */
export async function statePrint(pairs: readonly GitDirPlace[], looks: Looks = LOOKS_HERE, max = MAX_COPY_ENTRIES): Promise<{ print: string; newestMs: number; stores: Map<string, KnownStore[]> } | null> {
  const stores = new Map<string, KnownStore[]>();
  // What the daemon's read-only files are written from: configs, pointers, the object stores and their alternates.
  const requests = pairs.map((pair) => ({ host: pair.host, kind: pair.kind, extra: DAEMON_FILE_INPUTS[pair.kind].filter((name) => !keptFile(pair, name)).map((name) => path.join(pair.host, name)) }));
  const storePrint = async (pair: GitDirPlace): Promise<StatePrint> => {
    const print = new StatePrint();
    if (pair.kind === 'worktree') return print;
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
    return print;
  };
  try {
    const [walks, storePrints] = await Promise.all([looks.ask({ kind: 'print', pairs: requests, max }, () => printLooksHere(requests, max)), Promise.all(pairs.map(storePrint))]);
    const prints = pairs.map((pair, index) => {
      const print = storePrints[index] ?? new StatePrint();
      const walk = walks[index];
      if (walk === undefined) throw new Error(`no looks at ${pair.host}`);
      print.addLooks(walk);
      // The object format is not in it: read from the config (whose identity is), it is compared with each pair's.
      const header = `${pair.rel}\0${pair.host}\0${pair.kind}\0${(stores.get(pair.rel) ?? []).map((known) => known.store).join('\0')}`;
      return { text: `${header}\n${print.text()}`, newestMs: print.newestMs };
    });
    return { print: stableHash(prints.map((print) => print.text).join('\n'), 32), newestMs: Math.max(0, ...prints.map((print) => print.newestMs)), stores };
  } catch {
    return null;
  }
}

/** The looks a print asks the worker for, made on this thread: each git dir's state walk within one budget, and its extra files. */
async function printLooksHere(requests: readonly PairLookRequest[], max: number): Promise<PairLooks[]> {
  const budget = new CopyBudget(max);
  return Promise.all(
    requests.map(async (request) => {
      const print = new StatePrint();
      const extra = async (): Promise<void> => {
        const found = await Promise.all(request.extra.map((file) => lstatOrNull(file).catch(() => null)));
        request.extra.forEach((file, index) => {
          print.add(file, found[index] ?? null);
        });
      };
      await Promise.all([gitDirStatePrint(request, budget, print), extra()]);
      return { lines: print.lines, newestMs: print.newestMs };
    }),
  );
}
