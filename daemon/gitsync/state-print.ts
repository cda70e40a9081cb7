import path from 'node:path';
import { LOOKS_HERE, type LookAnswers, type LookRequest, type Looks, type PairLookRequest, type PairLooks } from '../os/look-worker.js';
import { lstatOrNull, readControlResult, type ControlRead } from '../os/untrusted-files.js';
import { stableHash } from '../os/text.js';
import type { GitDirFacts } from '../plan/git/git-dir.js';
import { configEntriesOf, CONFIG_MAX_BYTES } from '../plan/git/git-repo.js';
import { gitDirConfigs, gitDirPairs, gitDirPlaces, type GitDirPair, type GitDirPlace } from './git-dir-pairs.js';
import { storesPrint, type KnownStore } from './object-stores.js';
import { CopyBudget, gitDirStatePrint, keptFile, MAX_COPY_ENTRIES, StatePrint } from './sandbox-copy.js';

/**
 * The host files writeDaemonFiles reads besides the object stores, of a git dir of each kind; those
 * the copy takes too (config.worktree, a worktree's gitdir and commondir) are in its print already.
 */
const DAEMON_FILE_INPUTS = { common: ['config', 'config.worktree'], module: ['config', 'config.worktree'], worktree: ['config.worktree', 'gitdir', 'commondir'] } as const;

/** The print of the host's git dirs: its hash, when the newest of what it looked at changed, and each git dir's object stores. */
export interface HostPrint {
  print: string;
  newestMs: number;
  stores: Map<string, KnownStore[]>;
}

/**
 * The repository's git dirs with their object formats (gitDirPairs: the configs read, a reftable
 * repository refused), and the print of everything the copy and the daemon's files read of them
 * (null past the copy's bound `max`: never proven). All of it is one request to `looks`, made off
 * the main thread when it can: the configs read, the state walks, the object stores found and
 * their alternates files looked at.
 */
export async function hostState(facts: GitDirFacts, looks: Looks = LOOKS_HERE, max = MAX_COPY_ENTRIES): Promise<{ pairs: GitDirPair[]; print: HostPrint | null }> {
  const { configs, print } = await statePrint(gitDirPlaces(facts), gitDirConfigs(facts), looks, max);
  const pairs = await gitDirPairs(facts, (file) => Promise.resolve(file?.kind === 'file' ? configEntriesOf(file.path, configs.get(file.path) ?? { error: 'it was not read' }) : []));
  return { pairs, print };
}

/** The print of `places` (see hostState), with the `configs` read in the same request. */
export async function statePrint(places: readonly GitDirPlace[], configs: readonly string[], looks: Looks = LOOKS_HERE, max = MAX_COPY_ENTRIES): Promise<{ configs: Map<string, ControlRead>; print: HostPrint | null }> {
  const request = printRequest(places, configs, max);
  const answer = await looks.ask(request, () => printLooksHere(request));
  return { configs: new Map(configs.map((file, index) => [file, answer.configs[index] ?? { error: 'it was not read' }])), print: answer.pairs === null ? null : printOf(places, answer.pairs) };
}

/** What the worker is asked for a print of `places`: what the daemon's read-only files are written from beside each state walk (configs, pointers, the object stores and their alternates). */
export function printRequest(places: readonly GitDirPlace[], configs: readonly string[], max: number): Extract<LookRequest, { kind: 'print' }> {
  const pairs = places.map((place) => ({
    host: place.host,
    kind: place.kind,
    extra: DAEMON_FILE_INPUTS[place.kind].filter((name) => !keptFile(place, name)).map((name) => path.join(place.host, name)),
    objects: place.kind === 'worktree' ? null : path.join(place.host, 'objects'),
  }));
  return { kind: 'print', configs: [...configs], configMaxBytes: CONFIG_MAX_BYTES, pairs, max };
}

/** The print's hash from each git dir's looks; the object format is not in it: read from the config (whose identity is), it is compared with each pair's. */
function printOf(places: readonly GitDirPlace[], looks: readonly PairLooks[]): HostPrint | null {
  const stores = new Map<string, KnownStore[]>();
  const texts: string[] = [];
  let newestMs = 0;
  for (const [index, place] of places.entries()) {
    const found = looks[index];
    if (found === undefined) return null;
    if (place.kind !== 'worktree') stores.set(place.rel, found.stores);
    const print = new StatePrint();
    print.addLooks(found);
    texts.push(`${place.rel}\0${place.host}\0${place.kind}\0${found.stores.map((known) => known.store).join('\0')}\n${print.text()}`);
    newestMs = Math.max(newestMs, print.newestMs);
  }
  return { print: stableHash(texts.join('\n'), 32), newestMs, stores };
}

/** The print request's looks made on this thread: the configs read, each git dir's state walk within one budget, its extra files and object stores. */
async function printLooksHere(request: Extract<LookRequest, { kind: 'print' }>): Promise<LookAnswers['print']> {
  const budget = new CopyBudget(request.max);
  const pairLooks = async (pair: PairLookRequest): Promise<PairLooks> => {
    const print = new StatePrint();
    const extra = async (): Promise<void> => {
      const found = await Promise.all(pair.extra.map((file) => lstatOrNull(file).catch(() => null)));
      pair.extra.forEach((file, index) => {
        print.add(file, found[index] ?? null);
      });
    };
    const [stores] = await Promise.all([pair.objects === null ? [] : storesPrint(pair.objects, print), gitDirStatePrint(pair, budget, print), extra()]);
    return { lines: print.lines, newestMs: print.newestMs, stores };
  };
  const [configs, pairs] = await Promise.all([Promise.all(request.configs.map((file) => readControlResult(file, request.configMaxBytes))), Promise.all(request.pairs.map(pairLooks)).catch(() => null)]);
  return { configs, pairs };
}
