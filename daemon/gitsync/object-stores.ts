import { promises as fs, realpathSync, statSync, type Stats } from 'node:fs';
import path from 'node:path';
import { lstatOrNull, lstatSyncOrNull, readControlFile, readControlBytesSync } from '../os/untrusted-files.js';
import { StatePrint } from './sandbox-copy.js';

/** Git follows at most this many levels of alternates. */
const MAX_ALTERNATE_DEPTH = 5;
const ALTERNATES_MAX_BYTES = 64 * 1024;

/** What finding a repository's object stores asks of the file system, one step at a time. */
type StoreStep = { kind: 'real-dir'; dir: string } | { kind: 'alternates'; file: string };

/**
 * A host object store and the stores its `info/alternates` names, recursively (relative lines
 * against the store that names them, as git reads them), canonical, each once, in git's order.
 * Written once as steps, taken by objectStores (this thread's asynchronous calls) and
 * objectStoresSync (the look worker's), so both find the same stores by the same rules. Each
 * step's answer is null when it failed: a store that is missing is left out, an alternates file
 * that cannot be read names nothing, as git warns and goes on.
 */
function* storeSteps(objectsDir: string): Generator<StoreStep, string[], string | null> {
  const found: string[] = [];
  const pending: { dir: string; depth: number }[] = [{ dir: objectsDir, depth: 0 }];
  // Depth first, each store's alternates in their order before the next line's: git's order.
  while (pending.length > 0) {
    const { dir, depth } = pending.shift() as { dir: string; depth: number };
    const real = yield { kind: 'real-dir', dir };
    if (real === null || found.includes(real)) continue;
    found.push(real);
    if (depth >= MAX_ALTERNATE_DEPTH) continue;
    const text = yield { kind: 'alternates', file: path.join(real, 'info', 'alternates') };
    if (text === null) continue;
    const named: { dir: string; depth: number }[] = [];
    for (const line of text.split('\n')) {
      const entry = line.trim();
      if (entry === '' || entry.startsWith('#')) continue;
      named.push({ dir: path.resolve(real, entry), depth: depth + 1 });
    }
    pending.unshift(...named);
  }
  return found;
}

async function realDir(dir: string): Promise<string | null> {
  try {
    const real = await fs.realpath(dir);
    return (await fs.stat(real)).isDirectory() ? real : null;
  } catch {
    return null;
  }
}

function realDirSync(dir: string): string | null {
  try {
    // The system's realpath, as fs.promises.realpath (node's own synchronous one resolves in JavaScript).
    const real = realpathSync.native(dir);
    return statSync(real).isDirectory() ? real : null;
  } catch {
    return null;
  }
}

/** The stores storeSteps finds from `objectsDir`, looked at with this thread's asynchronous calls. */
export async function objectStores(objectsDir: string): Promise<string[]> {
  const steps = storeSteps(objectsDir);
  let step = steps.next();
  while (step.done !== true) {
    const { value } = step;
    step = steps.next(value.kind === 'real-dir' ? await realDir(value.dir) : await readControlFile(value.file, ALTERNATES_MAX_BYTES).catch(() => null));
  }
  return step.value;
}

/** objectStores with synchronous calls, for the daemon's look worker (daemon/os/look-worker.ts) and never its main thread. */
export function objectStoresSync(objectsDir: string): string[] {
  const steps = storeSteps(objectsDir);
  let step = steps.next();
  while (step.done !== true) {
    const { value } = step;
    let answer: string | null;
    if (value.kind === 'real-dir') answer = realDirSync(value.dir);
    else {
      try {
        answer = readControlBytesSync(value.file, ALTERNATES_MAX_BYTES).toString('utf8');
      } catch {
        answer = null;
      }
    }
    step = steps.next(answer);
  }
  return step.value;
}

/** A host object store the plan mounts read-only, and whether it names alternates of its own. */
export interface KnownStore {
  store: string;
  alternates: boolean;
}

/** The stores and each one's `info/alternates` (looked at: `alternates`) put in `print`: what a print of a git dir adds for its objects. */
function printStores(dirs: readonly string[], alternates: readonly (Stats | null)[], print: StatePrint): KnownStore[] {
  return dirs.map((store, index) => {
    const found = alternates[index] ?? null;
    print.add(path.join(store, 'info', 'alternates'), found);
    return { store, alternates: found !== null };
  });
}

/** A git dir's object stores from `objectsDir`, their alternates files printed into `print`. */
export async function storesPrint(objectsDir: string, print: StatePrint): Promise<KnownStore[]> {
  const dirs = await objectStores(objectsDir);
  const alternates = await Promise.all(dirs.map((store) => lstatOrNull(path.join(store, 'info', 'alternates')).catch(() => null)));
  return printStores(dirs, alternates, print);
}

/** storesPrint with synchronous calls (the look worker only). */
export function storesPrintSync(objectsDir: string, print: StatePrint): KnownStore[] {
  const dirs = objectStoresSync(objectsDir);
  const alternates = dirs.map((store) => lstatSyncOrNull(path.join(store, 'info', 'alternates')));
  return printStores(dirs, alternates, print);
}
