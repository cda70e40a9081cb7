import { promises as fs, statSync, type Stats } from 'node:fs';
import type { Looks } from '../os/look-worker.js';
import { later, type Defer } from './quiet-time.js';

/** One file's part of a fingerprint: its mtime and size, or `-` when it cannot be looked at. */
function stamp(file: string, stat: Stats | null): string {
  return stat === null ? `${file}:-` : `${file}:${stat.mtimeMs}:${stat.size}`;
}

/** mtime and size of each file (or `-` when absent): changes when any of them is edited or appears. */
export async function fingerprintOf(files: readonly string[]): Promise<string> {
  const stamps = await Promise.all(files.map(async (file) => stamp(file, await fs.stat(file).catch(() => null))));
  return stamps.join('|');
}

/** fingerprintOf with synchronous looks, for the daemon's look worker (daemon/os/look-worker.ts) and never its main thread. */
export function fingerprintOfSync(files: readonly string[]): string {
  return files
    .map((file) => {
      let stat: Stats | null = null;
      try {
        stat = statSync(file);
      } catch {
        // absent or unreadable: `-`, as fingerprintOf
      }
      return stamp(file, stat);
    })
    .join('|');
}

/** fingerprintOf through the look worker (`looks`), the same fingerprint whichever thread looks. */
export function fingerprintThrough(looks: Looks): (files: readonly string[]) => Promise<string> {
  return (files) => looks.ask({ kind: 'stamps', files: [...files] }, () => fingerprintOf(files));
}

export interface FingerprintCacheOptions<I, R> {
  compute(input: I): Promise<R>;
  key(input: I): string;
  /** Files whose change invalidates an answer; `result` lets an answer name its own sources. */
  watched(input: I, result: R): string[];
  now(): number;
  /** Backstop for what the watched files do not cover: an older answer is recomputed in the background. */
  ttlMs: number;
  /** Defaults to `fingerprintOf`; tests pass a fake file system. */
  fingerprint?: (files: readonly string[]) => Promise<string>;
  /** Starts a recomputation past the TTL (the daemon's quiet time); tests run it at once. */
  defer?: Defer;
}

/** The watched files' fingerprint, taken before the computation read them. */
interface Stamp {
  files: string[];
  fingerprint: string;
}

interface Entry<R> {
  at: number;
  result: Promise<R>;
  settled: boolean;
  /** null when the answer's files were not all stamped before computing: it is never reused. */
  stamp: Stamp | null;
  /** The check of the stamp under way, shared by the callers that arrive meanwhile. */
  checking: Promise<boolean> | null;
  /** Past the TTL: the answer that replaces this one is being computed. */
  refreshing: boolean;
}

function sameFiles(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((file, index) => file === b[index]);
}

/**
 * Answers that cost a process spawn (podman, git) are shared per key, single-flight, and reused
 * while the files they were read from are unchanged. Failures are never cached. The TTL is a
 * backstop for what the files do not cover: an unchanged answer older than that still serves the
 * caller that finds it so, while the next answer is computed for the ones after. A session
 * started minutes after the last one is thus answered without a spawn (without it, every acquire
 * after an idle spell would spawn podman and git again).
 *
 * A file that changes while the answer is computed must not leave that answer looking fresh, so
 * the fingerprint an answer is checked against is taken *before* computing, of the files the
 * previous answer for the key named. An answer whose files were not known in advance (the first
 * for a key, or one naming new files) is served but not reused: the next call computes again,
 * this time with its files stamped first.
 */
export class FingerprintCache<I, R> {
  private readonly entries = new Map<string, Entry<R>>();
  /** The watched files of each key's last answer, kept across forget() and TTL expiry. */
  private readonly knownFiles = new Map<string, string[]>();
  private readonly fingerprint: (files: readonly string[]) => Promise<string>;
  private readonly defer: Defer;

  constructor(private readonly options: FingerprintCacheOptions<I, R>) {
    this.fingerprint = options.fingerprint ?? fingerprintOf;
    this.defer = options.defer ?? later;
  }

  async get(input: I): Promise<R> {
    const key = this.options.key(input);
    const cached = this.entries.get(key);
    if (cached !== undefined) {
      // A caller that arrives while the answer is being computed shares it (single flight).
      if (!cached.settled) return cached.result;
      const { stamp } = cached;
      if (stamp !== null && (await this.unchanged(cached, stamp)) && this.entries.get(key) === cached) {
        if (this.options.now() - cached.at >= this.options.ttlMs) this.refresh(key, input, cached);
        return cached.result;
      }
      // Replaced while its files were looked at: callers share the computation under way, or
      // look at the answer that replaced it (a refresh that landed) rather than compute again.
      const next = this.entries.get(key);
      if (next !== undefined && next !== cached) return next.settled ? this.get(input) : next.result;
    }
    return this.compute(key, input);
  }

  /** Computes the answer that replaces `stale`, which serves meanwhile; a failure drops it. */
  private refresh(key: string, input: I, stale: Entry<R>): void {
    if (stale.refreshing) return;
    stale.refreshing = true;
    this.defer(() => {
      // Forgotten or replaced meanwhile: whoever did that computes the next answer.
      if (this.entries.get(key) !== stale) return;
      const fresh = this.start(key, input);
      fresh.result.then(
        () => {
          if (this.entries.get(key) === stale) this.entries.set(key, fresh);
        },
        () => {
          if (this.entries.get(key) === stale) this.entries.delete(key);
        },
      );
    });
  }

  /**
   * One look at the files for every caller that arrives while it runs, as one computation serves
   * them: sessions that start together stat each file once.
   */
  private unchanged(entry: Entry<R>, stamp: Stamp): Promise<boolean> {
    entry.checking ??= this.fingerprint(stamp.files)
      .then((fingerprint) => fingerprint === stamp.fingerprint)
      .finally(() => {
        entry.checking = null;
      });
    return entry.checking;
  }

  forget(input: I): void {
    this.entries.delete(this.options.key(input));
  }

  private compute(key: string, input: I): Promise<R> {
    const entry = this.start(key, input);
    this.entries.set(key, entry);
    return entry.result;
  }

  /** An entry for a new computation of `key`, not yet the one callers get. */
  private start(key: string, input: I): Entry<R> {
    const known = this.knownFiles.get(key) ?? null;
    const run = async (): Promise<{ value: R; stamp: Stamp | null }> => {
      const before = known === null ? null : await this.fingerprint(known);
      const value = await this.options.compute(input);
      const files = this.options.watched(input, value);
      this.knownFiles.set(key, files);
      return { value, stamp: before !== null && known !== null && sameFiles(files, known) ? { files, fingerprint: before } : null };
    };
    const pending = run();
    const entry: Entry<R> = { at: this.options.now(), result: pending.then(({ value }) => value), settled: false, stamp: null, checking: null, refreshing: false };
    pending.then(
      ({ stamp }) => {
        entry.stamp = stamp;
        entry.settled = true;
      },
      () => {
        if (this.entries.get(key) === entry) this.entries.delete(key);
      },
    );
    return entry;
  }
}
