import { later, type Defer } from '../cache/quiet-time.js';
import type { ProbeOutcome } from './builtin-probe.js';

/** A verified (or missing) socket is re-checked after this, even when the engine never restarts. */
export const PROBE_TTL_MS = 10 * 60_000;
/** A probe that could not tell (cut off, no usable image) is retried after this. */
export const UNVERIFIED_RETRY_MS = 60_000;

export interface ProbeRecord extends ProbeOutcome {
  /** Monotonic: the record's age runs from here. */
  at: number;
  /** Wall time of the same moment, only shown (`sandboxd engines`). */
  checkedAt: number;
  image: string;
}

export interface ProbeCacheOptions {
  /** Monotonic (clock.ts): a wall clock set back would keep a record fresh for as long as the step. */
  now(): number;
  /** Wall time for `checkedAt`; only shown. */
  wall(): number;
  ttlMs?: number;
  retryMs?: number;
  /** Starts a probe past the TTL (the daemon's quiet time); tests run it at once. */
  defer?: Defer;
}

/**
 * One probe per engine instance (DESIGN §7: single-flight, cached, redone after a restart, which
 * makes a new instance, or the TTL). Concurrent sessions share the probe under way; an outcome
 * that could not tell is kept briefly, and only for the image it was tried with. Past the TTL a
 * verified (or missing) socket still answers the session that finds it so, and the probe, a
 * container run of a second or more, runs again in the background for the sessions after it.
 */
export class ProbeCache {
  private readonly records = new Map<string, ProbeRecord>();
  private readonly pending = new Map<string, Promise<ProbeRecord>>();
  /** Instances whose background probe is waiting for its turn. */
  private readonly scheduled = new Set<string>();

  constructor(private readonly options: ProbeCacheOptions) {}

  latest(instance: string): ProbeRecord | null {
    return this.records.get(instance) ?? null;
  }

  get(instance: string, image: string, probe: () => Promise<ProbeOutcome>): Promise<ProbeRecord> {
    const record = this.records.get(instance);
    if (record !== undefined && record.state !== 'unverified') {
      if (!this.fresh(record, image) && !this.pending.has(instance) && !this.scheduled.has(instance)) {
        this.scheduled.add(instance);
        (this.options.defer ?? later)(() => {
          this.scheduled.delete(instance);
          if (this.records.get(instance) === record && !this.pending.has(instance)) this.start(instance, image, probe).catch(() => undefined);
        });
      }
      return Promise.resolve(record);
    }
    const running = this.pending.get(instance);
    if (running !== undefined) return running;
    if (record !== undefined && this.fresh(record, image)) return Promise.resolve(record);
    return this.start(instance, image, probe);
  }

  /** A failed probe drops what was known: the next session probes again and sees the failure. */
  private start(instance: string, image: string, probe: () => Promise<ProbeOutcome>): Promise<ProbeRecord> {
    // A probe of an instance forgotten meanwhile (an engine restarted) answers but stores nothing.
    const current = (): boolean => this.pending.get(instance) === started;
    const started: Promise<ProbeRecord> = probe().then(
      (outcome) => {
        const done: ProbeRecord = { ...outcome, at: this.options.now(), checkedAt: this.options.wall(), image };
        if (current()) this.records.set(instance, done);
        return done;
      },
      (error: unknown) => {
        if (current()) this.records.delete(instance);
        throw error;
      },
    );
    this.pending.set(instance, started);
    const clear = (): void => {
      if (current()) this.pending.delete(instance);
    };
    started.then(clear, clear);
    return started;
  }

  forget(instance: string): void {
    this.records.delete(instance);
    this.pending.delete(instance);
  }

  private fresh(record: ProbeRecord, image: string): boolean {
    const age = this.options.now() - record.at;
    if (record.state === 'unverified') return record.image === image && age < (this.options.retryMs ?? UNVERIFIED_RETRY_MS);
    return age < (this.options.ttlMs ?? PROBE_TTL_MS);
  }
}
