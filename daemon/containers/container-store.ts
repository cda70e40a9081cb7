import { promises as fs } from 'node:fs';
import path from 'node:path';
import * as z from 'zod/mini';
import { Engine, Id } from '../../shared/contracts/common.js';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { removeFile, writeFileAtomic } from '../os/files.js';
import { readRecordFile } from '../os/record-file.js';
import { readStateFile } from '../os/state-file.js';
import type { Logger } from '../os/logger.js';
import { ensureSecureDir } from '../os/secure-dir.js';
import { ENGINE_ENV_NAMES } from '../../shared/contracts/session-routes.js';

/** The daemon that wrote a record: its pid and start time (a reused pid is another process). */
export const DaemonIdentity = z.strictObject({
  pid: z.int().check(z.minimum(1), z.maximum(2 ** 31 - 1)),
  startTime: z.nullable(z.string().check(z.maxLength(200))),
});
export type DaemonIdentity = z.infer<typeof DaemonIdentity>;

/** A session's container as the daemon remembers it, across its own restarts. */
export const ContainerRecord = z.strictObject({
  /** The session id the container is labelled with; its cidfile is `<key>.cid`. */
  key: Id,
  /** The session that answers for it now: `key`, or the lease that renewed it after a restart. */
  sessionId: Id,
  engine: Engine,
  clientPid: z.int().check(z.minimum(1), z.maximum(2 ** 31 - 1)),
  clientStartTime: z.nullable(z.string().check(z.maxLength(200))),
  /** The session's PATH and engine variables: `rm -f` runs with these, never the daemon's. */
  path: z.string().check(z.maxLength(65_536)),
  env: z.partialRecord(z.enum(ENGINE_ENV_NAMES), z.string().check(z.maxLength(4096))),
  globalArgs: z.array(z.string().check(z.maxLength(4096))).check(z.maxLength(16)),
  /**
   * The daemon whose session this is: while it runs, no other daemon acts on the record. Absent
   * in records of earlier releases.
   */
  daemon: z.optional(DaemonIdentity),
});
export type ContainerRecord = z.infer<typeof ContainerRecord>;

/**
 * What changed about one key: its record written, forgotten (its container is gone, or its plan
 * was never handed out), released (the client took the container over: kept aside, so a start-up
 * sweep knows the container is accounted for), or its released record forgotten (the container
 * is gone).
 */
export type ContainerChange =
  | { key: string; kind: 'write'; record: ContainerRecord }
  | { key: string; kind: 'forget' | 'release' | 'forget-released' };

/** What a previous daemon left: records of sessions, and those of released sessions. */
export interface LoadedRecords {
  records: ContainerRecord[];
  released: ContainerRecord[];
}

const RECORD_FILE = /^([a-z]+_[A-Za-z0-9]{6,40})\.json$/;
/** What writeFileAtomic leaves behind when the daemon is killed in the middle of a write. */
const TEMP_FILE = /^\..*\.tmp$/;
const RELEASED_DIR = 'released';

/**
 * A session's first record is a new file: created and written in place (three thread-pool hops
 * where a temp file and a rename take four). A daemon killed in between leaves it empty, and its
 * plan was never handed out. A write that fails (a full disk) removes the file again: no plan is
 * handed out without its record. False when the file exists already (a previous daemon wrote it).
 */
async function createFile(file: string, data: string): Promise<boolean> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    await handle.writeFile(data);
    await handle.close();
  } catch (error) {
    await handle.close().catch(() => undefined);
    await removeFile(file);
    throw error;
  }
  return true;
}

/**
 * `containers/<key>.json` in the state dir, one file per session that has not been released, so a
 * daemon started after a `kill -9` knows which engines to ask and what to remove; a released
 * session's file moves to `containers/released/`, where it stays while its container exists. An
 * acquire writes its own record and nothing else (the same cost with a thousand sessions held as
 * with none); each file is written atomically, the changes of one key in order.
 */
export class ContainerStore {
  /** The last change queued for each key. */
  private readonly pending = new Map<string, Promise<void>>();
  /** Keys whose file this store wrote or loaded: a later write of one replaces it atomically. */
  private readonly onDisk = new Set<string>();
  private dirReady: Promise<void> | null = null;
  private releasedReady: Promise<void> | null = null;

  /** `legacyFile`: the single `containers.json` earlier releases wrote, read once and folded in. */
  constructor(
    private readonly dir: string,
    private readonly legacyFile: string,
    private readonly logger: Logger,
  ) {}

  async load(): Promise<LoadedRecords> {
    const [records, released] = await Promise.all([this.loadRecords(), this.loadReleased()]);
    return { records, released };
  }

  /** The records of sessions that were not released (what a session's acquire must know first). */
  async loadRecords(): Promise<ContainerRecord[]> {
    const records = await this.loadDir(this.dir);
    for (const record of records) this.onDisk.add(record.key);
    const legacy = await readRecordFile(this.legacyFile, 'containers', 4096, ContainerRecord, this.logger);
    if (legacy.length === 0) return records;
    const known = new Set(records.map((record) => record.key));
    const adopted = legacy.filter((record) => !known.has(record.key));
    await this.save(adopted.map((record) => ({ key: record.key, kind: 'write', record })));
    await fs.rm(this.legacyFile, { force: true });
    return [...records, ...adopted];
  }

  /**
   * The records of released sessions: one per session whose container a client may still run,
   * as many as sessions released within the last look's interval (thousands on a busy machine).
   */
  loadReleased(): Promise<ContainerRecord[]> {
    return this.loadDir(path.join(this.dir, RELEASED_DIR));
  }

  /**
   * Resolves once these changes (or later ones) are on disk. A record that cannot be written
   * rejects (the caller must not hand out its plan); the other changes are logged when they fail.
   */
  save(changes: readonly ContainerChange[]): Promise<void> {
    return Promise.all(changes.map((change) => this.apply(change))).then(() => undefined);
  }

  private apply(change: ContainerChange): Promise<void> {
    const previous = (this.pending.get(change.key) ?? Promise.resolve()).catch(() => undefined);
    const next = previous
      .then(() => this.perform(change))
      .catch((error: unknown) => {
        this.logger.error({ err: error, key: change.key, change: change.kind }, 'cannot change the container record');
        if (change.kind === 'write') throw error;
      })
      .finally(() => {
        if (this.pending.get(change.key) === next) this.pending.delete(change.key);
      });
    this.pending.set(change.key, next);
    return next;
  }

  private async perform(change: ContainerChange): Promise<void> {
    const file = path.join(this.dir, `${change.key}.json`);
    const releasedFile = path.join(this.dir, RELEASED_DIR, `${change.key}.json`);
    switch (change.kind) {
      case 'write': {
        this.dirReady ??= retryable(ensureSecureDir(this.dir), () => (this.dirReady = null));
        await this.dirReady;
        // No fsync on the warm path: the file survives a daemon kill -9 (what the records are
        // for); a power loss also ends the containers.
        const data = JSON.stringify(change.record);
        if (!this.onDisk.has(change.key) && (await createFile(file, data))) this.onDisk.add(change.key);
        else {
          await writeFileAtomic(file, data, 0o600, { durable: false });
          this.onDisk.add(change.key);
        }
        return;
      }
      case 'forget':
        this.onDisk.delete(change.key);
        return removeFile(file);
      case 'release':
        this.onDisk.delete(change.key);
        this.releasedReady ??= retryable(ensureSecureDir(path.join(this.dir, RELEASED_DIR)), () => (this.releasedReady = null));
        await this.releasedReady;
        // One rename, as cheap as the unlink it replaces; a record never written has nothing to move.
        return fs.rename(file, releasedFile).catch((error: unknown) => {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        });
      case 'forget-released':
        return removeFile(releasedFile);
    }
  }

  private async loadDir(dir: string): Promise<ContainerRecord[]> {
    const names = await fs.readdir(dir).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') this.logger.warn({ dir }, 'container records unreadable; ignoring them');
      return [];
    });
    const loaded = await Promise.all(names.map((name) => this.loadEntry(dir, name)));
    return loaded.filter((record) => record !== null);
  }

  /** A record file, validated and never trusted: what it names may be removed. */
  private async loadEntry(dir: string, name: string): Promise<ContainerRecord | null> {
    const file = path.join(dir, name);
    if (TEMP_FILE.test(name)) {
      await removeFile(file);
      return null;
    }
    const key = RECORD_FILE.exec(name)?.[1];
    if (key === undefined) return null;
    let json: unknown;
    try {
      const text = await readStateFile(file, { logger: this.logger, moveAside: true });
      if (text === null) return null;
      // Created, then the daemon was killed before writing it: that plan was never handed out.
      if (text === '') {
        await removeFile(file);
        return null;
      }
      json = JSON.parse(text);
    } catch {
      this.logger.warn({ file }, 'container record unreadable; ignoring it');
      return null;
    }
    const parsed = ContainerRecord.safeParse(json, ENGLISH);
    if (!parsed.success || parsed.data.key !== key) {
      this.logger.warn({ file, issue: parsed.error?.issues[0]?.message ?? 'its key is not its file name' }, 'container record invalid; ignoring it');
      return null;
    }
    return parsed.data;
  }
}

/** A one-time set-up that a failure lets the next caller try again. */
function retryable(setup: Promise<void>, reset: () => void): Promise<void> {
  return setup.catch((error: unknown) => {
    reset();
    throw error;
  });
}
