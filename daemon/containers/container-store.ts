import { z } from 'zod';
import { Engine, Id } from '../../shared/contracts/common.js';
import { writeFileAtomic } from '../atomic-file.js';
import { readRecordFile } from '../record-file.js';
import type { Logger } from '../logger.js';
import { ENGINE_ENV_NAMES } from './engine-cli.js';

/** A session's container as the daemon remembers it, across its own restarts. */
export const ContainerRecord = z.strictObject({
  /** The session id the container is labelled with; its cidfile is `<key>.cid`. */
  key: Id,
  /** The session that answers for it now: `key`, or the lease that renewed it after a restart. */
  sessionId: Id,
  engine: Engine,
  clientPid: z.number().int().min(1).max(2 ** 31 - 1),
  clientStartTime: z.string().max(200).nullable(),
  /** The session's PATH and engine variables: `rm -f` runs with these, never the daemon's. */
  path: z.string().max(65_536),
  env: z.partialRecord(z.enum(ENGINE_ENV_NAMES), z.string().max(4096)),
  globalArgs: z.array(z.string().max(4096)).max(16),
});
export type ContainerRecord = z.infer<typeof ContainerRecord>;

/**
 * `containers.json` next to the state file: the containers of sessions that have not been released,
 * so a daemon started after a `kill -9` knows which engines to ask and what to remove. Written
 * atomically, one write at a time (the pattern of the tunnel store).
 */
export class ContainerStore {
  private writing: Promise<void> = Promise.resolve();
  /** A write that has not started yet: later saves join it instead of queueing one fsync each. */
  private queued: Promise<void> | null = null;
  private latest: () => readonly ContainerRecord[] = () => [];

  constructor(
    private readonly file: string,
    private readonly logger: Logger,
  ) {}

  load(): Promise<ContainerRecord[]> {
    return readRecordFile(this.file, 'containers', 4096, ContainerRecord, this.logger);
  }

  /**
   * Resolves once this version (or a later one) is on disk; a failed write is logged, not thrown.
   * `snapshot` is read when the write starts, so saves that arrive meanwhile cost one write and one
   * serialisation between them, however many sessions there are.
   */
  save(snapshot: () => readonly ContainerRecord[]): Promise<void> {
    this.latest = snapshot;
    if (this.queued === null) {
      this.queued = this.writing
        .then(() => {
          this.queued = null;
          const body = JSON.stringify({ version: 1, containers: this.latest() });
          // Rewritten on every acquire and release: survive a daemon kill -9 (what the records are
          // for) without an fsync on the warm path; a power loss also ends the containers.
          return writeFileAtomic(this.file, body, 0o600, { durable: false });
        })
        .catch((error: unknown) => {
          this.logger.error({ err: error, file: this.file }, 'cannot write the container records');
        });
      this.writing = this.queued;
    }
    return this.queued;
  }
}
