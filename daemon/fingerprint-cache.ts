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
}

interface Entry<R> {
  at: number;
  result: Promise<R>;
  fingerprint: Promise<string>;
}

/**
 * Answers that cost a process spawn (podman, git) are shared per key, single-flight, and reused
 * while the files they were read from are unchanged and the TTL has not run out. Failures are
 * never cached.
 */
export class FingerprintCache<I, R> {
  private readonly entries = new Map<string, Entry<R>>();

  constructor(private readonly options: FingerprintCacheOptions<I, R>) {}

  async get(input: I): Promise<R> {
    const key = this.options.key(input);
    const cached = this.entries.get(key);
    if (cached !== undefined && this.options.now() - cached.at < this.options.ttlMs) {
      const value = await cached.result;
      if ((await fingerprintOf(this.options.watched(input, value))) === (await cached.fingerprint)) return value;
    }
    const result = this.options.compute(input);
    const entry: Entry<R> = {
      at: this.options.now(),
      result,
      fingerprint: result.then((value) => fingerprintOf(this.options.watched(input, value))),
    };
    entry.fingerprint.catch(() => undefined);
    this.entries.set(key, entry);
    result.catch(() => {
      if (this.entries.get(key) === entry) this.entries.delete(key);
    });
    return result;
  }

  forget(input: I): void {
    this.entries.delete(this.options.key(input));
  }
}
