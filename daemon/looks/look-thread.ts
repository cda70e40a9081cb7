import { parentPort } from 'node:worker_threads';
import { fingerprintOfSync } from '../cache/fingerprint-cache.js';
import { storesPrintSync } from '../gitsync/object-stores.js';
import { CopyBudget, gitDirStatePrintSync, StatePrint } from '../gitsync/sandbox-copy.js';
import type { LookAnswers, LookMessage, LookReady, LookReply, LookRequest, PairLookRequest, PairLooks } from '../os/look-worker.js';
import { lstatSyncOrNull, readControlResultSync } from '../os/untrusted-files.js';

/**
 * The daemon's look worker's program (daemon/os/look-worker.ts starts it; scripts/bundle.js
 * bundles it as its own file): each request's looks made synchronously, on this thread only, with
 * the same rules and the same answer as the main thread's asynchronous looks that stand in for it.
 */

/** The print request's looks (state-print.ts's printLooksHere, synchronously): the configs read, each git dir's state walk within one budget, its extra files and object stores. */
function printLooks(request: Extract<LookRequest, { kind: 'print' }>): LookAnswers['print'] {
  const configs = request.configs.map((file) => readControlResultSync(file, request.configMaxBytes));
  const budget = new CopyBudget(request.max);
  const pairLooks = (pair: PairLookRequest): PairLooks => {
    const print = new StatePrint();
    gitDirStatePrintSync(pair, budget, print);
    for (const file of pair.extra) print.add(file, lstatSyncOrNull(file));
    const stores = pair.objects === null ? [] : storesPrintSync(pair.objects, print);
    return { lines: print.lines, newestMs: print.newestMs, stores };
  };
  try {
    return { configs, pairs: request.pairs.map(pairLooks) };
  } catch {
    // As there: past the bound, or a listing that failed, and there is no print.
    return { configs, pairs: null };
  }
}

function answer(request: LookRequest): LookAnswers[LookRequest['kind']] {
  return request.kind === 'print' ? printLooks(request) : fingerprintOfSync(request.files);
}

parentPort?.on('message', (message: LookMessage) => {
  let reply: LookReply;
  try {
    reply = { id: message.id, answer: answer(message.request) };
  } catch (error) {
    // The main thread's own looks answer instead (and meet the same error, or not, as they find it).
    reply = { id: message.id, error: error instanceof Error ? error.message : String(error) };
  }
  parentPort?.postMessage(reply);
});
const ready: LookReady = { ready: true };
parentPort?.postMessage(ready);
