import { lstatSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { fingerprintOfSync } from '../cache/fingerprint-cache.js';
import { CopyBudget, gitDirStatePrintSync, StatePrint } from '../gitsync/sandbox-copy.js';
import type { LookAnswers, LookMessage, LookReady, LookReply, LookRequest, PairLookRequest } from '../os/look-worker.js';

/**
 * The daemon's look worker's program (daemon/os/look-worker.ts starts it; scripts/bundle.js
 * bundles it as its own file): each request's looks made synchronously, on this thread only, with
 * the same rules and the same answer as the main thread's asynchronous looks that stand in for it.
 */

/** Each git dir's state walk within one budget (a print's), and its extra files beside it. */
function printLooks(pairs: readonly PairLookRequest[], max: number): LookAnswers['print'] {
  const budget = new CopyBudget(max);
  return pairs.map((pair) => {
    const print = new StatePrint();
    gitDirStatePrintSync(pair, budget, print);
    for (const file of pair.extra) {
      let stat = null;
      try {
        stat = lstatSync(file);
      } catch {
        // null, as lstatOrNull's callers there
      }
      print.add(file, stat);
    }
    return { lines: print.lines, newestMs: print.newestMs };
  });
}

function answer(request: LookRequest): LookAnswers[LookRequest['kind']] {
  return request.kind === 'print' ? printLooks(request.pairs, request.max) : fingerprintOfSync(request.files);
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
