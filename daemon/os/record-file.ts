import * as z from 'zod/mini';
import { ENGLISH } from '../../shared/contracts/messages.js';
import type { Logger } from './logger.js';
import { readStateFile } from './state-file.js';

/**
 * Reads a `{ version: 1, <field>: [...] }` file of records a previous daemon wrote. A missing file
 * is no records; an unreadable one, or a record that fails its schema, is logged and ignored, never
 * trusted: what a record names may be signalled or removed. One that is not a regular file (a
 * FIFO, a symlink) is moved aside unread (state-file.ts).
 */
export async function readRecordFile<S extends z.ZodMiniType>(file: string, field: string, maxRecords: number, record: S, logger: Logger): Promise<z.output<S>[]> {
  let json: unknown;
  try {
    const text = await readStateFile(file, { logger, moveAside: true });
    if (text === null) return [];
    json = JSON.parse(text);
  } catch {
    logger.warn({ file }, 'record file unreadable; ignoring it');
    return [];
  }
  const parsed = z.strictObject({ version: z.literal(1), [field]: z.array(z.unknown()).check(z.maxLength(maxRecords)) }).safeParse(json);
  if (!parsed.success) {
    logger.warn({ file }, 'record file unreadable; ignoring it');
    return [];
  }
  const records: z.output<S>[] = [];
  for (const [index, candidate] of (parsed.data[field] as unknown[]).entries()) {
    const result = record.safeParse(candidate, ENGLISH);
    if (result.success) records.push(result.data);
    else logger.warn({ file, index, issue: result.error.issues[0]?.message }, 'record invalid; ignoring it');
  }
  return records;
}
