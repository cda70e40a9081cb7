import { promises as fs } from 'node:fs';

/** mtime and size of each file (or `-` when absent): changes when any of them is edited or appears. */
export async function fingerprintOf(files: readonly string[]): Promise<string> {
  const stamps = await Promise.all(
    files.map(async (file) => {
      try {
        const stat = await fs.stat(file);
        return `${file}:${stat.mtimeMs}:${stat.size}`;
      } catch {
        return `${file}:-`;
      }
    }),
  );
  return stamps.join('|');
}

export interface FingerprintCacheOptions<I, R> {
  compute(input: I): Promise<R>;
  key(input: I): string;
  /** Files whose change invalidates an answer; `result` lets an answer name its own sources. */
  watched(input: I, result: R): string[];
  now(): number;
  /** Backstop for what the watched files do not cover. */
  ttlMs: number;
  /** Defaults to `fingerprintOf`; tests pass a fake file system. */
  fingerprint?: (files: readonly string[]) => Promise<string>;
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
}

function sameFiles(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((file, index) => file === b[index]);
}

/**
 * Answers that cost a process spawn (podman, git) are shared per key, single-flight, and reused
 * while the files they were read from are unchanged and the TTL has not run out. Failures are
 * never cached.
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

  constructor(private readonly options: FingerprintCacheOptions<I, R>) {
    this.fingerprint = options.fingerprint ?? fingerprintOf;
  }

  async get(input: I): Promise<R> {
    const key = this.options.key(input);
    const cached = this.entries.get(key);
    if (cached !== undefined && this.options.now() - cached.at < this.options.ttlMs) {
      // A caller that arrives while the answer is being computed shares it (single flight).
      if (!cached.settled) return cached.result;
      const { stamp } = cached;
      if (stamp !== null && (await this.unchanged(cached, stamp)) && this.entries.get(key) === cached) return cached.result;
      // Callers that shared a check that failed share the computation it set off, too.
      const next = this.entries.get(key);
      if (next !== undefined && next !== cached && !next.settled) return next.result;
    }
    return this.compute(key, input);
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
    const known = this.knownFiles.get(key) ?? null;
    const run = async (): Promise<{ value: R; stamp: Stamp | null }> => {
      const before = known === null ? null : await this.fingerprint(known);
      const value = await this.options.compute(input);
      const files = this.options.watched(input, value);
      this.knownFiles.set(key, files);
      return { value, stamp: before !== null && known !== null && sameFiles(files, known) ? { files, fingerprint: before } : null };
    };
    const pending = run();
    const entry: Entry<R> = { at: this.options.now(), result: pending.then(({ value }) => value), settled: false, stamp: null, checking: null };
    pending.then(
      ({ stamp }) => {
        entry.stamp = stamp;
        entry.settled = true;
      },
      () => {
        if (this.entries.get(key) === entry) this.entries.delete(key);
      },
    );
    this.entries.set(key, entry);
    return entry.result;
  }
}
