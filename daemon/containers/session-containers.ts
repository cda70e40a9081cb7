import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { SessionContainer } from '../../shared/contracts/sessions.js';
import type { Logger } from '../logger.js';
import { sameProcess, type ProcessProbe } from '../process-identity.js';
import { removeFile } from '../remove-file.js';
import type { Clock, EndReason } from '../session-registry.js';
import type { ContainerChange, ContainerRecord } from './container-store.js';
import { OWNER_LABEL, SESSION_LABEL, type EngineTarget } from './engine-cli.js';

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
  probe: ProcessProbe;
  clock: Clock;
  /** Whether the registry still holds this session. */
  isLive(sessionId: string): boolean;
  /**
   * How long a record inherited from a previous daemon waits for its live client to renew the
   * lease before it counts as expired, as the previous daemon's lease would have.
   */
  claimWindowMs: number;
  /** What a previous daemon recorded; read once, before anything is written. */
  load(): Promise<ContainerRecord[]>;
  /** Persists the records that changed (null: forgotten) since the last save. */
  save(changes: readonly ContainerChange[]): Promise<void>;
  /** `rm -f` of the containers labelled with `key` and the owner; the ids removed. */
  remove(record: ContainerRecord, labels: { session: string; owner: string }): Promise<string[]>;
  ensureDir(dir: string): Promise<void>;
  logger: Logger;
}

/** A cidfile holds the full id; anything else there was not written by an engine. */
const CONTAINER_ID = /^[0-9a-f]{12,64}$/;

/**
 * Which container belongs to which session (issue 14): the plan labels the container and names a
 * fresh cidfile; when a session ends because its client died, its lease expired or the user
 * removed it, the container is removed with it. A released session's container is the client's
 * business and is left alone. Records outlive the daemon (`save`), so the next one finishes the job.
 */
export class SessionContainers {
  private readonly records = new Map<string, ContainerRecord>();
  /** Keys of records now answering to a renewed session (`sessionId !== key`). */
  private readonly renewed = new Set<string>();
  /** Container ids read from cidfiles, by record key. */
  private readonly ids = new Map<string, string>();
  /** Keys of records a previous daemon left: only these can lack a live session that ends them. */
  private readonly inherited = new Set<string>();
  /** Keys written or forgotten since the last save: an acquire writes its own record only. */
  private readonly dirty = new Set<string>();
  /** Removal failed (engine unreachable): kept on disk for the next daemon, not retried each sweep. */
  private readonly failed = new Set<string>();
  private readonly startedAt: number;
  /** Saving before the previous daemon's records are in would drop them from the file. */
  private readonly ready: Promise<void>;
  private dirReady: Promise<void> | null = null;

  constructor(private readonly deps: SessionContainersDeps) {
    this.startedAt = deps.clock.monotonic();
    this.ready = (async () => {
      for (const record of await deps.load()) {
        this.setRecord(record);
        this.inherited.add(record.key);
      }
      // What was loaded is on disk already.
      this.dirty.clear();
    })();
    // Whoever waits on it next hears of a failure; this only keeps it from being unhandled.
    this.ready.catch(() => undefined);
  }

  cidfile(key: string): string {
    return path.join(this.deps.dir, `${key}.cid`);
  }

  has(sessionId: string): boolean {
    return this.ofSession(sessionId).length > 0;
  }

  /** The `run` flags that tie the container to the session; recorded before the plan is handed out. */
  async prepare(request: ContainerRequest): Promise<{ flags: string[]; container: SessionContainer }> {
    await this.ready;
    this.dirReady ??= this.deps.ensureDir(this.deps.dir).catch((error: unknown) => {
      this.dirReady = null;
      throw error;
    });
    await this.dirReady;
    const { sessionId, renews, engine, path: searchPath, env, globalArgs, clientPid, clientStartTime } = request;
    if (renews !== undefined) this.claim(renews, request);
    this.setRecord({ key: sessionId, sessionId, engine, path: searchPath, env, globalArgs, clientPid, clientStartTime });
    await this.persist();
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
   * leases with it); `released` forgets them and leaves the container alone; anything else
   * removes the container. The records leave the map at once, so a second call finds nothing.
   */
  async ended(sessionId: string, reason: EndReason): Promise<string[]> {
    if (reason === 'shutdown') return [];
    await this.ready;
    const records = this.ofSession(sessionId);
    if (records.length === 0) return [];
    for (const record of records) this.deleteRecord(record.key);
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
    await this.persist();
    if (errors.length > 0) throw errors[0];
    return removed;
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
    const text = (await fs.readFile(cidfile, 'utf8').catch(() => '')).trim();
    if (!CONTAINER_ID.test(text)) return { id: null, cidfile };
    if (this.records.has(record.key)) this.ids.set(record.key, text);
    return { id: text, cidfile };
  }

  /**
   * Records no live session answers for: those a previous daemon left (it was killed or stopped).
   * Their container goes when the client is gone, or when the client has not renewed its lease
   * within the claim window; called at start-up and on the sweep timer.
   */
  async sweep(): Promise<void> {
    await this.ready;
    // Only inherited records can be orphans: the sweep does not walk every live session's.
    const orphans = [...this.inherited]
      .map((key) => this.records.get(key))
      .filter((record): record is ContainerRecord => record !== undefined && !this.failed.has(record.key) && !this.deps.isLive(record.sessionId));
    if (orphans.length === 0) return;
    const alive = await this.deps.probe.startTimes([...new Set(orphans.map((record) => record.clientPid))]);
    const expired = this.deps.clock.monotonic() - this.startedAt > this.deps.claimWindowMs;
    for (const record of orphans) {
      if (this.records.get(record.key) !== record || this.deps.isLive(record.sessionId)) continue;
      const gone = !sameProcess(alive, record.clientPid, record.clientStartTime);
      if (!gone && !expired) continue;
      await this.ended(record.sessionId, gone ? 'client-exited' : 'lease-expired').catch((error: unknown) => {
        this.deps.logger.error({ err: error, sessionId: record.sessionId }, 'cannot remove the container of a session that ended');
      });
    }
  }

  /** Only the same client process may take over a container by renewing its lease. */
  private claim(renews: string, request: ContainerRequest): void {
    for (const record of this.ofSession(renews)) {
      const sameClient = record.clientPid === request.clientPid && (record.clientStartTime === null || request.clientStartTime === null || record.clientStartTime === request.clientStartTime);
      if (sameClient && !this.deps.isLive(renews)) this.setRecord({ ...record, sessionId: request.sessionId });
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

  private setRecord(record: ContainerRecord): void {
    this.records.set(record.key, record);
    this.dirty.add(record.key);
    if (record.sessionId === record.key) this.renewed.delete(record.key);
    else this.renewed.add(record.key);
  }

  private deleteRecord(key: string): void {
    this.records.delete(key);
    this.inherited.delete(key);
    this.dirty.add(key);
    this.renewed.delete(key);
    this.ids.delete(key);
  }

  private persist(): Promise<void> {
    const changes = [...this.dirty].map((key) => ({ key, record: this.records.get(key) ?? null }));
    this.dirty.clear();
    return this.deps.save(changes);
  }
}
