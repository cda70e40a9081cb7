import { promises as fs } from 'node:fs';
import path from 'node:path';
import * as z from 'zod/mini';
import { Engine, Id } from '../../shared/contracts/common.js';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { writeFileAtomic } from '../atomic-file.js';
import { readRecordFile } from '../record-file.js';
import { removeFile } from '../remove-file.js';
import type { Logger } from '../logger.js';
import { ensureSecureDir } from '../secure-dir.js';
import { ENGINE_ENV_NAMES } from './engine-cli.js';

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
});
export type ContainerRecord = z.infer<typeof ContainerRecord>;

/** One record to write (`record`) or to forget (`null`). */
export interface ContainerChange {
  key: string;
  record: ContainerRecord | null;
}

const RECORD_FILE = /^([a-z]+_[A-Za-z0-9]{6,40})\.json$/;
/** What writeFileAtomic leaves behind when the daemon is killed in the middle of a write. */
const TEMP_FILE = /^\..*\.tmp$/;

/**
 * A session's first record is a new file: created and written in place (three thread-pool hops
 * where a temp file and a rename take four). A daemon killed in between leaves it empty, and its
 * plan was never handed out. False when the file exists already (a previous daemon wrote it).
 */
async function createFile(file: string, data: string): Promise<boolean> {
  try {
    await fs.writeFile(file, data, { flag: 'wx', mode: 0o600 });
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}

/**
 * `containers/<key>.json` in the state dir, one file per session that has not been released, so a
 * daemon started after a `kill -9` knows which engines to ask and what to remove. An acquire writes
 * its own record and nothing else (issue 13: the same cost with 1000 sessions held as with none);
 * each file is written atomically, the writes of one key in order.
 */
export class ContainerStore {
  /** The last write or removal queued for each key. */
  private readonly pending = new Map<string, Promise<void>>();
  /** Keys whose file this store wrote or loaded: a later write of one replaces it atomically. */
  private readonly onDisk = new Set<string>();
  private dirReady: Promise<void> | null = null;

  /** `legacyFile`: the single `containers.json` earlier releases wrote, read once and folded in. */
  constructor(
    private readonly dir: string,
    private readonly legacyFile: string,
    private readonly logger: Logger,
  ) {}

  async load(): Promise<ContainerRecord[]> {
    const names = await fs.readdir(this.dir).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') this.logger.warn({ dir: this.dir }, 'container records unreadable; ignoring them');
      return [];
    });
    const loaded = await Promise.all(names.map((name) => this.loadEntry(name)));
    const records = loaded.filter((record) => record !== null);
    for (const record of records) this.onDisk.add(record.key);
    const legacy = await readRecordFile(this.legacyFile, 'containers', 4096, ContainerRecord, this.logger);
    if (legacy.length === 0) return records;
    const known = new Set(records.map((record) => record.key));
    const adopted = legacy.filter((record) => !known.has(record.key));
    await this.save(adopted.map((record) => ({ key: record.key, record })));
    await fs.rm(this.legacyFile, { force: true });
    return [...records, ...adopted];
  }

  /** Resolves once these changes (or later ones) are on disk; a failed write is logged, not thrown. */
  save(changes: readonly ContainerChange[]): Promise<void> {
    return Promise.all(changes.map((change) => this.apply(change))).then(() => undefined);
  }

  private apply({ key, record }: ContainerChange): Promise<void> {
    const file = path.join(this.dir, `${key}.json`);
    const previous = this.pending.get(key) ?? Promise.resolve();
    const next = previous
      .then(async () => {
        if (record === null) {
          this.onDisk.delete(key);
          return removeFile(file);
        }
        this.dirReady ??= ensureSecureDir(this.dir).catch((error: unknown) => {
          this.dirReady = null;
          throw error;
        });
        await this.dirReady;
        // No fsync on the warm path: the file survives a daemon kill -9 (what the records are
        // for); a power loss also ends the containers.
        const data = JSON.stringify(record);
        if (!this.onDisk.has(key) && (await createFile(file, data))) this.onDisk.add(key);
        else {
          await writeFileAtomic(file, data, 0o600, { durable: false });
          this.onDisk.add(key);
        }
      })
      .catch((error: unknown) => {
        this.logger.error({ err: error, file }, 'cannot write the container record');
      })
      .finally(() => {
        if (this.pending.get(key) === next) this.pending.delete(key);
      });
    this.pending.set(key, next);
    return next;
  }

  /** A record file, validated and never trusted: what it names may be removed. */
  private async loadEntry(name: string): Promise<ContainerRecord | null> {
    const file = path.join(this.dir, name);
    if (TEMP_FILE.test(name)) {
      await removeFile(file);
      return null;
    }
    const key = RECORD_FILE.exec(name)?.[1];
    if (key === undefined) return null;
    let json: unknown;
    try {
      const text = await fs.readFile(file, 'utf8');
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
