import * as z from 'zod/mini';
import { AbsolutePath } from '../../shared/contracts/common.js';
import { writeFileAtomic } from '../os/files.js';
import { OWNER_LABEL } from '../containers/engine-cli.js';
import type { Logger } from '../os/logger.js';
import { readRecordFile } from '../os/record-file.js';

/** What a helper container or volume is (`relay` or `probe`); with the owner label, whose it is. */
export const HELPER_LABEL = 'sandboxd.helper';
export type HelperKind = 'relay' | 'probe';

/** The `--label` flags of every helper container and volume (DESIGN §9: sandboxd's own, by owner). */
export function helperLabels(owner: string, kind: HelperKind): string[] {
  return ['--label', `${OWNER_LABEL}=${owner}`, '--label', `${HELPER_LABEL}=${kind}`];
}

/** The variables a session's docker commands run with (engine-identifier's dockerEnv). */
const DOCKER_ENV_NAMES = ['PATH', 'HOME', 'DOCKER_HOST', 'DOCKER_CONTEXT', 'DOCKER_CONFIG', 'SSH_AUTH_SOCK'] as const;
const MAX_RECORDS = 256;

/**
 * A relay container or hub (and its volume, of the same name) as the daemon remembers it across its own
 * restarts: the engine it runs on, reached with the session's docker and environment, never the
 * daemon's.
 */
export const HelperRecord = z.strictObject({
  /** A session's relay, or an engine's hub: daemon-made names only. */
  name: z.string().check(z.regex(/^sandboxd-(?:relay|hub)-[0-9a-f]{16}$/)),
  docker: AbsolutePath,
  env: z.partialRecord(z.enum(DOCKER_ENV_NAMES), z.string().check(z.maxLength(65_536))),
});
export type HelperRecord = z.infer<typeof HelperRecord>;

/** The record of a relay container: its docker and that docker's variables (no others). */
export function helperRecord(name: string, docker: string, env: Readonly<Record<string, string>>): HelperRecord {
  const picked: HelperRecord['env'] = {};
  for (const variable of DOCKER_ENV_NAMES) {
    const value = env[variable];
    if (value !== undefined) picked[variable] = value;
  }
  return { name, docker, env: picked };
}

/**
 * `helpers.json` in the state dir: the relay containers this daemon made and has not removed yet,
 * so one started after a `kill -9` knows which engines to sweep. A record is written before its
 * container is created and forgotten once container and volume are gone; writes run one at a time.
 */
export class HelperRecords {
  private records: Promise<Map<string, HelperRecord>> | null = null;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly file: string,
    private readonly logger: Logger,
  ) {}

  async load(): Promise<HelperRecord[]> {
    return [...(await this.loaded()).values()];
  }

  add(record: HelperRecord): Promise<void> {
    return this.change((records) => records.set(record.name, record));
  }

  forget(names: readonly string[]): Promise<void> {
    return this.change((records) => {
      for (const name of names) records.delete(name);
    });
  }

  private loaded(): Promise<Map<string, HelperRecord>> {
    this.records ??= readRecordFile(this.file, 'helpers', MAX_RECORDS, HelperRecord, this.logger).then((records) => new Map(records.map((record) => [record.name, record])));
    return this.records;
  }

  private change(edit: (records: Map<string, HelperRecord>) => void): Promise<void> {
    const next = this.writing.then(async () => {
      const records = await this.loaded();
      edit(records);
      await writeFileAtomic(this.file, `${JSON.stringify({ version: 1, helpers: [...records.values()] })}\n`, 0o600);
    });
    this.writing = next.catch(() => undefined);
    return next;
  }
}
