import { Worker } from 'node:worker_threads';
import type { Timers } from './clock.js';
import type { ControlRead } from './untrusted-files.js';

/**
 * File looks (`lstat`s, listings) off the daemon's main thread. An acquire in a git repository
 * looks at a hundred files or so; handed to libuv one promise at a time, each look costs the main
 * thread far more than the system call, and the main thread is what bounds an acquire. A worker
 * thread makes the same looks synchronously, a batch or a whole walk per message. Synchronous
 * looks never run on the main thread: a hung network or FUSE file system would freeze the whole
 * daemon there, while here it stalls only the worker. Whatever the worker does not answer within
 * a short bound (busy, hung, broken, gone, not started yet), the caller's own looks on the main
 * thread (today's asynchronous ones) answer instead: a worker can delay an answer by that bound
 * at most, never withhold it.
 */

export type GitDirKind = 'common' | 'module' | 'worktree';

/**
 * One host git dir to print: its state walk (gitDirStatePrint's rules), `extra` files looked at
 * beside it, and the object stores found from `objects` (objectStores' rules; none for a worktree)
 * with their alternates files.
 */
export interface PairLookRequest {
  host: string;
  kind: GitDirKind;
  extra: string[];
  objects: string | null;
}

/** A git dir's print lines (StatePrint's), the newest change among them, and its object stores. */
export interface PairLooks {
  lines: string[];
  newestMs: number;
  stores: { store: string; alternates: boolean }[];
}

/**
 * `print`: the whole proof of a copy made ahead in one message, the configs read (readControlFile's
 * rules, `configMaxBytes`) and every git dir printed within one budget of `max` looks.
 */
export type LookRequest = { kind: 'print'; configs: string[]; configMaxBytes: number; pairs: PairLookRequest[]; max: number } | { kind: 'stamps'; files: string[] };

/** What each request is answered with: the same value as its fallback on the main thread. */
export interface LookAnswers {
  /** Each config's read, in the request's order; the prints, or null when they could not be taken (past the bound, a listing failed). */
  print: { configs: ControlRead[]; pairs: PairLooks[] | null };
  stamps: string;
}

export type LookMessage = { id: number; request: LookRequest };
export type LookReply = { id: number; answer: unknown } | { id: number; error: string };
/** What the thread's program says once it is loaded and listening (a thread is online before its program is loaded). */
export type LookReady = { ready: true };

export interface Looks {
  /** The worker's answer to `request`, or `fallback`'s (the same looks, on this thread). */
  ask<K extends LookRequest['kind']>(request: Extract<LookRequest, { kind: K }>, fallback: () => Promise<LookAnswers[K]>): Promise<LookAnswers[K]>;
}

/** Every look on the calling thread: what runs where no worker is given (tests, tools). */
export const LOOKS_HERE: Looks = { ask: (_request, fallback) => fallback() };

/** The part of a worker_threads Worker the looks use; a test gives one that never answers or dies. */
export interface LookThread {
  postMessage(message: LookMessage): void;
  on(event: 'message', listener: (reply: LookReply | LookReady) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'exit', listener: (code: number) => void): unknown;
  terminate(): Promise<number>;
  unref(): void;
}

/** Past this an unanswered look is answered on the main thread (a print takes about a millisecond in the worker). */
export const LOOK_BOUND_MS = 100;
/** Threads started before the looks stay on the main thread for good (one that cannot start or keeps dying). */
const MAX_STARTS = 4;

export interface LookWorkerOptions {
  /** Starts the worker's thread (the bundled look-thread program). */
  start: () => LookThread;
  timers: Timers;
  boundMs?: number;
}

/** What a worker's life shows (the daemon logs it): ready, gone (the next request starts another), given up for good. */
export type LookEvent = { kind: 'online' } | { kind: 'gone'; reason: string } | { kind: 'given-up' };

interface Pending {
  answered(answer: unknown): void;
  /** The worker will not answer (it failed the request, died or was closed): the fallback answers now. */
  failed(): void;
}

/** One worker per daemon, started on first use or by `start()`, replaced when it dies, ended by `close()`. */
export class LookWorker implements Looks {
  private thread: LookThread | null = null;
  private online = false;
  /** A request went unanswered past the bound: the worker is skipped until it answers again. */
  private stuck = false;
  private closed = false;
  private starts = 0;
  /** This thread is the last one started: once it is gone the looks stay on the main thread. */
  private giveUpAfter = false;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly boundMs: number;
  private report: (event: LookEvent) => void = () => undefined;

  constructor(private readonly options: LookWorkerOptions) {
    this.boundMs = options.boundMs ?? LOOK_BOUND_MS;
  }

  /** `report` hears of the worker's life, whoever starts its thread (`start`, or the first request). */
  listen(report: (event: LookEvent) => void): void {
    this.report = report;
  }

  /** Starts the thread ahead of the first request (it boots while nothing waits for it). */
  start(report?: (event: LookEvent) => void): void {
    if (report !== undefined) this.listen(report);
    this.threadReady();
  }

  ask<K extends LookRequest['kind']>(request: Extract<LookRequest, { kind: K }>, fallback: () => Promise<LookAnswers[K]>): Promise<LookAnswers[K]> {
    const thread = this.threadReady();
    if (thread === null) return fallback();
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      let settled = false;
      let fellBack = false;
      const settle = (finish: () => void): void => {
        if (settled) return;
        settled = true;
        cancel();
        finish();
      };
      const fallBack = (): void => {
        if (settled || fellBack) return;
        fellBack = true;
        fallback().then(
          (answer) => {
            settle(() => {
              resolve(answer);
            });
          },
          (error: unknown) => {
            settle(() => {
              reject(error instanceof Error ? error : new Error(String(error)));
            });
          },
        );
      };
      // Whichever answers first: the worker's looks and the fallback's are both taken after the call.
      const cancel = this.options.timers.after(this.boundMs, () => {
        if (this.pending.has(id)) this.stuck = true;
        fallBack();
      });
      this.pending.set(id, {
        answered: (answer) => {
          settle(() => {
            resolve(answer as LookAnswers[K]);
          });
        },
        failed: fallBack,
      });
      try {
        thread.postMessage({ id, request });
      } catch {
        this.pending.delete(id);
        fallBack();
      }
    });
  }

  /** Ends the thread; requests under way are answered by their fallbacks. A thread stuck in a look is left to end with the process. */
  async close(): Promise<void> {
    this.closed = true;
    const thread = this.thread;
    this.gone(thread, null);
    if (thread === null) return;
    await new Promise<void>((resolve) => {
      const cancel = this.options.timers.after(this.boundMs, resolve);
      thread.terminate().then(
        () => {
          cancel();
          resolve();
        },
        () => {
          cancel();
          resolve();
        },
      );
    });
  }

  /** The thread when it can take a request now, starting one when there is none. */
  private threadReady(): LookThread | null {
    if (this.closed || this.stuck) return null;
    if (this.thread === null) {
      if (this.starts >= MAX_STARTS) return null;
      this.starts += 1;
      if (this.starts === MAX_STARTS) this.giveUpAfter = true;
      let thread: LookThread;
      try {
        thread = this.options.start();
      } catch {
        return null;
      }
      this.thread = thread;
      this.online = false;
      thread.unref();
      thread.on('message', (reply) => {
        if (this.thread !== thread) return;
        if ('ready' in reply) {
          this.online = true;
          this.report({ kind: 'online' });
        } else this.reply(reply);
      });
      thread.on('error', (error) => {
        this.gone(thread, error.message);
      });
      thread.on('exit', (code) => {
        this.gone(thread, `it exited (${String(code)})`);
      });
    }
    return this.online ? this.thread : null;
  }

  private reply(reply: LookReply): void {
    const pending = this.pending.get(reply.id);
    if (pending === undefined) return;
    this.pending.delete(reply.id);
    this.stuck = false;
    if ('answer' in reply) pending.answered(reply.answer);
    else pending.failed();
  }

  /** The thread failed or ended: what it owed is answered by the fallbacks, and the next request starts another. */
  private gone(thread: LookThread | null, reason: string | null): void {
    if (thread === null || this.thread !== thread) return;
    if (reason !== null) this.report(this.giveUpAfter ? { kind: 'given-up' } : { kind: 'gone', reason });
    this.thread = null;
    this.online = false;
    this.stuck = false;
    const owed = [...this.pending.values()];
    this.pending.clear();
    for (const pending of owed) pending.failed();
  }
}

/** The real thread: the bundled look-thread program (scripts/bundle.js) at `file`. */
export function startLookThread(file: string): LookThread {
  return new Worker(file, { stdout: false, stderr: false });
}
