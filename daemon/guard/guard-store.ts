import * as z from 'zod/mini';
import { AbsolutePath } from '../../shared/contracts/common.js';
import { writeFileAtomic } from '../os/files.js';
import type { Logger } from '../os/logger.js';
import { readRecordFile } from '../os/record-file.js';
import { ensureSecureDir } from '../os/secure-dir.js';
import path from 'node:path';

/**
 * What a guard must still know after a `kill -9` of the daemon: which repositories sandboxes could
 * write, since when (files changed before that are the user's), what every session held read-only,
 * and the findings not told yet. A daemon that starts checks each one before anything else.
 */
export const GuardRecord = z.strictObject({
  key: AbsolutePath,
  commonDir: z.nullable(AbsolutePath),
  tops: z.array(AbsolutePath).check(z.maxLength(256)),
  pendingIncludes: z.array(AbsolutePath).check(z.maxLength(256)),
  hooksPaths: z.array(AbsolutePath).check(z.maxLength(256)),
  hooksWritable: z.boolean(),
  configWritable: z.boolean(),
  cutoffMs: z.number(),
  /** Read-only in every session's plan: path and the identity its directory had then. */
  protected: z.array(z.tuple([AbsolutePath, z.string().check(z.maxLength(100))])).check(z.maxLength(10_000)),
  warnings: z.array(z.string().check(z.maxLength(4096))).check(z.maxLength(64)),
  /** Wall-clock ms of the last session's end (or start): records left alone for a day are dropped. */
  touchedAt: z.number(),
});
export type GuardRecord = z.infer<typeof GuardRecord>;

export const MAX_GUARD_RECORDS = 256;

export interface GuardStore {
  load(): Promise<GuardRecord[]>;
  save(records: readonly GuardRecord[]): Promise<void>;
}

/** `guard.json` in the state dir, rewritten whole (it holds few records), one write at a time. */
export function fileGuardStore(stateDir: string, logger: Logger): GuardStore {
  const file = path.join(stateDir, 'guard.json');
  let queue: Promise<void> = Promise.resolve();
  let dirReady: Promise<void> | null = null;
  return {
    load: () => readRecordFile(file, 'repositories', MAX_GUARD_RECORDS, GuardRecord, logger),
    save(records) {
      const data = `${JSON.stringify({ version: 1, repositories: records })}\n`;
      const write = queue.then(async () => {
        dirReady ??= ensureSecureDir(stateDir).catch((error: unknown) => {
          dirReady = null;
          throw error;
        });
        await dirReady;
        // Not fsynced: a crash of the daemon keeps what was written; a power loss takes the
        // containers down with it.
        await writeFileAtomic(file, data, 0o600, { durable: false });
      });
      queue = write.catch(() => undefined);
      return write;
    },
  };
}
