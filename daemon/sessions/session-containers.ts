import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { SessionContainer } from '../../shared/contracts/sessions.js';
import type { Logger } from '../os/logger.js';
import { sameProcess, type ProcessProbe } from '../os/process-identity.js';
import { removeFile } from '../os/files.js';
import { readStateFile } from '../os/state-file.js';
import type { Defer } from '../cache/quiet-time.js';
import type { Clock, EndReason } from './session-registry.js';
import type { ContainerChange, ContainerRecord, DaemonIdentity } from '../containers/container-store.js';
import { OWNER_LABEL, SESSION_LABEL, type EngineTarget, type OwnedContainer } from '../containers/engine-cli.js';

/** The engine writes a cidfile in the daemon's own dir; what is not a regular file there holds no id. */
async function readCidfile(cidfile: string): Promise<string> {
  return ((await readStateFile(cidfile, { maxBytes: 4096 }).catch(() => null)) ?? '').trim();
}

/** What `prepare` needs to know about the session whose plan is being built. */
export interface ContainerRequest extends EngineTarget {
  sessionId: string;
  clientPid: number;
  clientStartTime: string | null;
  /** The lease this one renews: a container recorded under it becomes this session's. */
  renews?: string | undefined;
}

export interface SessionContainersDeps {
  /** Daemon-owned, 0700: where the engines write the cidfiles. */
  dir: string;
  /** The daemon instance label's value: which user and state dir the containers belong to. */
  owner: string;
  /** This daemon, as its records name it. */
  self: DaemonIdentity;
  probe: ProcessProbe;
  clock: Clock;
  /** Whether the registry still holds this session. */
  isLive(sessionId: string): boolean;
  /**
   * How long a record inherited from a previous daemon waits for its live client to renew the
   * lease before it counts as expired, as the previous daemon's lease would have.
   */
  claimWindowMs: number;
  /**
   * How often, after the start-up sweep, containers that no record names are looked for again;
   * also how long a released session's container may be missing before its record is forgotten.
   */
  unrecordedSweepMs: number;
  /**
   * When that look runs: it spawns the engine, so it waits for a moment without requests (a
   * daemon started after a crash is busy with its clients' renewals first).
   */
  defer: Defer;
  /** Whether a daemon of an earlier layout answers: records that name no daemon may be its. */
  strayAnswers(): Promise<boolean>;
  /** What a previous daemon recorded of sessions not released; read once, before anything is written. */
  load(): Promise<ContainerRecord[]>;
  /** What it recorded of released sessions (their containers are the clients'); read once. */
  loadReleased(): Promise<ContainerRecord[]>;
  /** Persists what changed since the last save; rejects when a record could not be written. */
  save(changes: readonly ContainerChange[]): Promise<void>;
  /** `rm -f` of the containers labelled with `key` and the owner; the ids removed. */
  remove(record: ContainerRecord, labels: { session: string; owner: string }): Promise<string[]>;
  /** Removes those of them that never started or have exited; says how many still run. */
  removeStopped(record: ContainerRecord, labels: { session: string; owner: string }): Promise<{ removed: string[]; running: number }>;
  /** The session containers carrying the owner label on a target's engine. */
  listOwned(target: EngineTarget): Promise<OwnedContainer[]>;
  /** `rm -f` of owner-labelled containers by id. */
  removeOwned(target: EngineTarget, ids: readonly string[]): Promise<void>;
  ensureDir(dir: string): Promise<void>;
  logger: Logger;
}

/** A cidfile holds the full id; anything else there was not written by an engine. */
const CONTAINER_ID = /^[0-9a-f]{12,64}$/;
/**
 * A look for containers no record names that did not get through (an engine that did not answer
 * in time, a daemon of an earlier layout that answered) is tried again this much later, up to
 * this many times in a row, before it waits for the next regular one: the look at start-up is the
 * one that finds what a killed daemon left.
 */
const UNRECORDED_RETRY_MS = 5_000;
const UNRECORDED_RETRIES = 5;

/** Which engine a record's container is on: records with the same target share one listing. */
function targetKey({ engine, path: searchPath, env, globalArgs }: EngineTarget): string {
  return JSON.stringify([engine, searchPath, Object.entries(env).sort(), globalArgs]);
}

function stateWriteFailed(dir: string, cause: unknown): SandboxdError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new SandboxdError('STATE_WRITE_FAILED', `cannot record the session's container in ${dir}: ${reason}`, {
    remedy: `Free space in ${dir} (or fix its permissions), or point SANDBOXD_STATE_DIR elsewhere; no plan was handed out.`,
    cause,
  });
}

/**
 * Which container belongs to which session: the plan labels the container and names a
 * fresh cidfile; when a session ends because its client died, its lease expired or the user
 * removed it, the container is removed with it. A released session's container is the client's
 * while it runs (its record is kept aside while the container exists), and is removed once it
 * never started or has exited: no container outlives its session by accident. Records
 * outlive the daemon (`save`), so the next one finishes the job; a record another live daemon
 * wrote is never acted on.
 */
export class SessionContainers {
  private readonly records = new Map<string, ContainerRecord>();
  /** Records of released sessions: their containers are the clients' and match a record. */
  private readonly released = new Map<string, ContainerRecord>();
  /** Monotonic ms of the first look that did not find a released session's container, by key. */
  private readonly releasedMissingSince = new Map<string, number>();
  /** Keys of records now answering to a renewed session (`sessionId !== key`). */
  private readonly renewed = new Set<string>();
  /** The lease a renewal took a record from, until the renewal is through or abandoned. */
  private readonly claimedFrom = new Map<string, string>();
  /** Container ids read from cidfiles, by record key. */
  private readonly ids = new Map<string, string>();
  /** Keys of records a previous daemon left: only these can lack a live session that ends them. */
  private readonly inherited = new Set<string>();
  /** What changed per key since the last save: an acquire writes its own record only. */
  private readonly dirty = new Map<string, ContainerChange['kind']>();
  /** Removal failed (engine unreachable): kept on disk for the next daemon, not retried each sweep. */
  private readonly failed = new Set<string>();
  /** Sessions whose end is under way: a second `ended` shares it (sessions rm while the registry ends it). */
  private readonly ending = new Map<string, Promise<string[]>>();
  private readonly startedAt: number;
  /** Monotonic ms when the next look for containers no record names is due. */
  private unrecordedDueAt = Number.NEGATIVE_INFINITY;
  /** Looks in a row that did not get through. */
  private unrecordedFailures = 0;
  private unrecordedScheduled = false;
  /**
   * The previous daemon's records of sessions, in before anything is written: a record file
   * created meanwhile would be read back as one of its own.
   */
  private readonly ready: Promise<void>;
  /**
   * Its records of released sessions: only the look for containers no record names, and a purge,
   * need them, so no acquire waits for them (they grow with the sessions released lately).
   */
  private readonly releasedReady: Promise<void>;
  /** Released keys this daemon set aside or forgot itself: what it did is newer than what it loads. */
  private readonly releasedTouched = new Set<string>();
  private dirReady: Promise<void> | null = null;

  constructor(private readonly deps: SessionContainersDeps) {
    this.startedAt = deps.clock.monotonic();
    this.ready = (async () => {
      for (const record of await deps.load()) {
        this.put(record);
        this.inherited.add(record.key);
      }
    })();
    this.releasedReady = Promise.all([this.ready, deps.loadReleased()]).then(([, released]) => {
      for (const record of released) {
        if (this.releasedTouched.has(record.key) || this.records.has(record.key)) continue;
        this.released.set(record.key, record);
      }
    });
    // Whoever waits on them next hears of a failure; this only keeps them from being unhandled.
    this.ready.catch(() => undefined);
    this.releasedReady.catch(() => undefined);
  }

  cidfile(key: string): string {
    return path.join(this.deps.dir, `${key}.cid`);
  }

  has(sessionId: string): boolean {
    return this.ofSession(sessionId).length > 0;
  }

  /**
   * The `run` flags that tie the container to the session, once its record is on disk. A record
   * that cannot be written (a full disk) fails the acquire with STATE_WRITE_FAILED: a container
   * started from a plan without its record would outlive a crash of this daemon.
   */
  async prepare(request: ContainerRequest): Promise<{ flags: string[]; container: SessionContainer }> {
    await this.ready;
    this.dirReady ??= this.deps.ensureDir(this.deps.dir).catch((error: unknown) => {
      this.dirReady = null;
      throw error;
    });
    await this.dirReady;
    const { sessionId, renews, engine, path: searchPath, env, globalArgs, clientPid, clientStartTime } = request;
    const before = new Map([sessionId, ...(renews === undefined ? [] : this.ofSession(renews).map((record) => record.key))].map((key) => [key, this.records.get(key)]));
    if (renews !== undefined) this.claim(renews, request);
    this.setRecord({ key: sessionId, sessionId, engine, path: searchPath, env, globalArgs, clientPid, clientStartTime, daemon: this.deps.self });
    try {
      await this.persist();
    } catch (error) {
      for (const [key, record] of before) {
        if (record === undefined) this.deleteRecord(key);
        else this.put(record);
        this.dirty.delete(key);
      }
      throw stateWriteFailed(path.dirname(this.deps.dir), error);
    }
    const cidfile = this.cidfile(sessionId);
    return {
      flags: ['--label', `${SESSION_LABEL}=${sessionId}`, '--label', `${OWNER_LABEL}=${this.deps.owner}`, '--cidfile', cidfile],
      container: { id: null, cidfile },
    };
  }

  /**
   * The registry learned the client's start time after the acquire (macOS): the record takes it
   * too, so a daemon started later tells a reused pid from the client, as on Linux.
   */
  async started(sessionId: string, clientStartTime: string): Promise<void> {
    await this.ready;
    const unknown = this.ofSession(sessionId).filter((record) => record.clientStartTime === null);
    if (unknown.length === 0) return;
    for (const record of unknown) this.setRecord({ ...record, clientStartTime });
    await this.persist();
  }

  /**
   * The session is over. `shutdown` keeps the records for the next daemon (clients renew their
   * leases with it); `released` sets them aside and removes only a container that never started
   * or has exited (one still running is the client's); anything else removes the container. A
   * second call while the first is under way shares it.
   */
  ended(sessionId: string, reason: EndReason): Promise<string[]> {
    if (reason === 'shutdown') return Promise.resolve([]);
    const under = this.ending.get(sessionId);
    if (under !== undefined) return under;
    const work = this.end(sessionId, reason).finally(() => {
      this.ending.delete(sessionId);
    });
    this.ending.set(sessionId, work);
    return work;
  }

  private async end(sessionId: string, reason: EndReason): Promise<string[]> {
    await this.ready;
    const records = this.ofSession(sessionId);
    if (records.length === 0) return [];
    // Only a container the engine created can be left behind: the rest cost no engine call.
    const created = reason === 'released' ? await this.created(records) : [];
    for (const record of records) this.deleteRecord(record.key, reason === 'released' ? record : null);
    const removed: string[] = [];
    const errors: unknown[] = [];
    for (const record of reason === 'released' ? [] : records) {
      try {
        const ids = await this.deps.remove(record, { session: record.key, owner: this.deps.owner });
        if (ids.length > 0) this.deps.logger.info({ sessionId, reason, containers: ids }, 'removed the session\'s container');
        removed.push(...ids);
      } catch (error) {
        errors.push(error);
        this.setRecord(record);
        this.inherited.add(record.key);
        this.failed.add(record.key);
      }
    }
    await Promise.all(records.filter((record) => !this.records.has(record.key)).map((record) => removeFile(this.cidfile(record.key))));
    await this.persist().catch((error: unknown) => {
      this.deps.logger.error({ err: error, sessionId }, 'cannot keep the record of a container that could not be removed');
    });
    if (errors.length > 0) throw errors[0];
    if (created.length > 0) await this.tidyReleased(sessionId, created);
    return removed;
  }

  /** The records whose cidfile the engine wrote: their container was created. */
  private async created(records: readonly ContainerRecord[]): Promise<ContainerRecord[]> {
    const written = await Promise.all(
      records.map(async (record) => this.ids.has(record.key) || CONTAINER_ID.test(await readCidfile(this.cidfile(record.key)))),
    );
    return records.filter((_record, index) => written[index] === true);
  }

  /**
   * A released session's container that never started (a run interrupted before it could) or has
   * exited goes now; one that runs stays the client's. A record whose containers are all gone is
   * forgotten; one with none yet stays aside (a client may start it a while after its plan).
   */
  private async tidyReleased(sessionId: string, records: readonly ContainerRecord[]): Promise<void> {
    let forgot = false;
    for (const record of records) {
      try {
        const { removed, running } = await this.deps.removeStopped(record, { session: record.key, owner: this.deps.owner });
        if (removed.length === 0) continue;
        this.deps.logger.info({ sessionId, containers: removed }, 'removed the released session\'s container, which was not running');
        if (running === 0 && this.released.get(record.key) === record) {
          this.forgetReleased(record.key);
          forgot = true;
        }
      } catch (error) {
        this.deps.logger.warn({ err: error, sessionId }, 'cannot look at the released session\'s container; the next sweep does');
      }
    }
    if (!forgot) return;
    await this.persist().catch((error: unknown) => {
      this.deps.logger.error({ err: error, sessionId }, 'cannot forget the record of a released container that was removed');
    });
  }

  private forgetReleased(key: string): void {
    this.releasedTouched.add(key);
    this.released.delete(key);
    this.releasedMissingSince.delete(key);
    this.dirty.set(key, 'forget-released');
  }

  /**
   * The acquire failed after its record was written: no plan was handed out, so no container can
   * exist of its own, and its record is forgotten rather than set aside as a released one. A
   * container a failed renewal took over answers to the lease it renewed again.
   */
  async abandon(sessionId: string): Promise<void> {
    await this.ready;
    const records = this.ofSession(sessionId);
    if (records.length === 0) return;
    for (const record of records) {
      const previous = this.claimedFrom.get(record.key);
      this.claimedFrom.delete(record.key);
      if (record.key === sessionId || previous === undefined) this.deleteRecord(record.key);
      else this.setRecord({ ...record, sessionId: previous });
    }
    await this.persist().catch((error: unknown) => {
      this.deps.logger.error({ err: error, sessionId }, 'cannot forget the record of an acquire that failed');
    });
  }

  /** Every engine a record names (released ones too), each once: where a purge looks. */
  async targets(): Promise<EngineTarget[]> {
    await this.releasedReady;
    const targets = new Map<string, EngineTarget>();
    for (const record of [...this.records.values(), ...this.released.values()]) {
      const { engine, path: searchPath, env, globalArgs } = record;
      targets.set(targetKey(record), { engine, path: searchPath, env, globalArgs });
    }
    return [...targets.values()];
  }

  /** What `sessions ls` shows: the container a renewed lease took over, else the session's own. */
  async describe(sessionId: string): Promise<SessionContainer | null> {
    await this.ready;
    const records = this.ofSession(sessionId).sort((a, b) => Number(a.key === sessionId) - Number(b.key === sessionId));
    const record = records[0];
    if (record === undefined) return null;
    const cidfile = this.cidfile(record.key);
    // The engine writes the id once: after that every heartbeat answers from memory.
    const known = this.ids.get(record.key);
    if (known !== undefined) return { id: known, cidfile };
    const text = await readCidfile(cidfile);
    if (!CONTAINER_ID.test(text)) return { id: null, cidfile };
    if (this.records.has(record.key)) this.ids.set(record.key, text);
    return { id: text, cidfile };
  }

  /**
   * Records no live session answers for: those a previous daemon left (it was killed or stopped).
   * Their container goes when the client is gone, or when the client has not renewed its lease
   * within the claim window; never while the daemon that wrote the record still runs. At start-up
   * and then now and again, containers carrying this owner's label that no record names are
   * removed. Called at start-up and on the sweep timer.
   */
  async sweep(): Promise<void> {
    await this.ready;
    // Only inherited records can be orphans: the sweep does not walk every live session's.
    const orphans = [...this.inherited]
      .map((key) => this.records.get(key))
      .filter((record): record is ContainerRecord => record !== undefined && !this.failed.has(record.key) && !this.deps.isLive(record.sessionId));
    const stray = orphans.some((record) => record.daemon === undefined) || this.unrecordedDue() ? await this.deps.strayAnswers() : false;
    if (orphans.length > 0) await this.sweepOrphans(orphans, stray);
    if (this.unrecordedDue() && !stray) {
      this.unrecordedScheduled = true;
      this.deps.defer(() => {
        void this.sweepUnrecorded()
          .catch((error: unknown) => {
            this.deps.logger.error({ err: error }, 'the sweep of containers no record names failed');
            return false;
          })
          .then((through) => {
            this.unrecordedFailures = through ? 0 : this.unrecordedFailures + 1;
            const retry = !through && this.unrecordedFailures <= UNRECORDED_RETRIES;
            this.unrecordedDueAt = this.deps.clock.monotonic() + (retry ? UNRECORDED_RETRY_MS : this.deps.unrecordedSweepMs);
            this.unrecordedScheduled = false;
          });
      });
    }
  }

  private async sweepOrphans(orphans: readonly ContainerRecord[], stray: boolean): Promise<void> {
    const daemons = orphans.flatMap((record) => (record.daemon === undefined || record.daemon.pid === this.deps.self.pid ? [] : [record.daemon.pid]));
    const alive = await this.deps.probe.startTimes([...new Set([...orphans.map((record) => record.clientPid), ...daemons])]);
    const expired = this.deps.clock.monotonic() - this.startedAt > this.deps.claimWindowMs;
    for (const record of orphans) {
      if (this.records.get(record.key) !== record || this.deps.isLive(record.sessionId)) continue;
      // Another daemon's session (a record of an earlier release: maybe the stray's) is its own business.
      const owner = record.daemon;
      const ownerAlive = owner === undefined ? stray : owner.pid !== this.deps.self.pid && sameProcess(alive, owner.pid, owner.startTime);
      if (ownerAlive) continue;
      const gone = !sameProcess(alive, record.clientPid, record.clientStartTime);
      if (!gone && !expired) continue;
      await this.ended(record.sessionId, gone ? 'client-exited' : 'lease-expired').catch((error: unknown) => {
        this.deps.logger.error({ err: error, sessionId: record.sessionId }, 'cannot remove the container of a session that ended');
      });
    }
  }

  private unrecordedDue(): boolean {
    return !this.unrecordedScheduled && this.deps.clock.monotonic() >= this.unrecordedDueAt;
  }

  /**
   * A container labelled with this owner whose session no record names (its record was lost, or
   * a daemon before this one handed out a plan it could not record) is removed; one of a released
   * session is the client's; a released record whose container stays gone is forgotten. Only the
   * engines the records name are asked: nothing else says where such a container could run.
   * False when it did not get through (see UNRECORDED_RETRY_MS).
   */
  private async sweepUnrecorded(): Promise<boolean> {
    // A released session's container is the client's: none is taken for one no record names.
    await this.releasedReady;
    // A daemon of an earlier layout that came up meanwhile may have written records not loaded here.
    if (await this.deps.strayAnswers()) return false;
    let through = true;
    const targets = new Map<string, { target: EngineTarget; released: string[] }>();
    for (const record of [...this.records.values(), ...this.released.values()]) {
      const key = targetKey(record);
      const entry = targets.get(key) ?? { target: record, released: [] };
      if (this.released.get(record.key) === record) entry.released.push(record.key);
      targets.set(key, entry);
    }
    for (const { target, released } of targets.values()) {
      let owned: OwnedContainer[];
      try {
        owned = await this.deps.listOwned(target);
      } catch (error) {
        this.deps.logger.warn({ err: error, engine: target.engine }, 'cannot list this owner\'s containers; looking again later');
        through = false;
        continue;
      }
      const unrecorded = owned.filter((container) => !this.records.has(container.session) && !this.released.has(container.session));
      if (unrecorded.length > 0) {
        try {
          await this.deps.removeOwned(target, unrecorded.map((container) => container.id));
          this.deps.logger.warn({ containers: unrecorded.map((container) => container.id), sessions: unrecorded.map((container) => container.session) }, 'removed containers of this daemon that no record names');
        } catch (error) {
          this.deps.logger.error({ err: error }, 'cannot remove containers that no record names');
          through = false;
        }
      }
      // A released session's container that has exited since is gone once its session is.
      const exited = owned.filter((container) => container.stopped && this.released.has(container.session));
      let cleared: string[] = [];
      if (exited.length > 0) {
        try {
          await this.deps.removeOwned(target, exited.map((container) => container.id));
          this.deps.logger.info({ containers: exited.map((container) => container.id) }, 'removed exited containers of released sessions');
          cleared = [...new Set(exited.map((container) => container.session))];
        } catch (error) {
          this.deps.logger.error({ err: error }, 'cannot remove exited containers of released sessions');
          through = false;
        }
      }
      const present = new Set(owned.filter((container) => !cleared.includes(container.session) || !container.stopped).map((container) => container.session));
      const gone = [...cleared.filter((key) => !present.has(key)), ...this.releasedGone(released.filter((key) => !cleared.includes(key)), present)];
      for (const key of gone) this.forgetReleased(key);
      if (gone.length > 0) await this.persist();
    }
    return through;
  }

  /**
   * Released sessions whose container has been missing for a regular look's interval. A client
   * starts its container some time after the plan (an image pull first, a loaded machine): a
   * record forgotten at once would leave that container to the next look as one no record names.
   */
  private releasedGone(released: readonly string[], present: ReadonlySet<string>): string[] {
    const now = this.deps.clock.monotonic();
    return released.filter((key) => {
      if (present.has(key)) {
        this.releasedMissingSince.delete(key);
        return false;
      }
      const since = this.releasedMissingSince.get(key);
      if (since === undefined) this.releasedMissingSince.set(key, now);
      return since !== undefined && now - since >= this.deps.unrecordedSweepMs;
    });
  }

  /** Only the same client process may take over a container by renewing its lease. */
  private claim(renews: string, request: ContainerRequest): void {
    for (const record of this.ofSession(renews)) {
      const sameClient = record.clientPid === request.clientPid && (record.clientStartTime === null || request.clientStartTime === null || record.clientStartTime === request.clientStartTime);
      if (sameClient && !this.deps.isLive(renews)) {
        this.claimedFrom.set(record.key, renews);
        this.setRecord({ ...record, sessionId: request.sessionId, daemon: this.deps.self });
      }
    }
  }

  private ofSession(sessionId: string): ContainerRecord[] {
    // A record is keyed by its first session; only a renewed one (few) answers to another id.
    const own = this.records.get(sessionId);
    const found = own?.sessionId === sessionId ? [own] : [];
    for (const key of this.renewed) {
      const record = this.records.get(key);
      if (record?.sessionId === sessionId && key !== sessionId) found.push(record);
    }
    return found;
  }

  private put(record: ContainerRecord): void {
    this.records.set(record.key, record);
    this.released.delete(record.key);
    this.releasedMissingSince.delete(record.key);
    if (record.sessionId === record.key) this.renewed.delete(record.key);
    else this.renewed.add(record.key);
  }

  private setRecord(record: ContainerRecord): void {
    this.put(record);
    this.dirty.set(record.key, 'write');
  }

  /** `released`: the client took the container, whose record is kept aside while it exists. */
  private deleteRecord(key: string, released: ContainerRecord | null = null): void {
    this.records.delete(key);
    this.inherited.delete(key);
    this.dirty.set(key, released === null ? 'forget' : 'release');
    if (released !== null) {
      this.released.set(key, released);
      this.releasedTouched.add(key);
    }
    this.renewed.delete(key);
    this.claimedFrom.delete(key);
    this.ids.delete(key);
  }

  private persist(): Promise<void> {
    const changes = [...this.dirty].map(([key, kind]): ContainerChange => {
      const record = this.records.get(key);
      return kind === 'write' && record !== undefined ? { key, kind, record } : { key, kind: kind === 'write' ? 'forget' : kind };
    });
    this.dirty.clear();
    return this.deps.save(changes);
  }
}
