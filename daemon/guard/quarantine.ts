import { promises as fs } from 'node:fs';
import path from 'node:path';
import { QUARANTINE_SUFFIX } from './fs-edge.js';
import type { Finding } from './rules.js';

export interface Quarantined {
  finding: Finding;
  /** Where it was moved; null when it could not be moved (then `error` says why). */
  movedTo: string | null;
  /** A known-good file was written in its place. */
  restored: boolean;
  error: string | null;
}

const MAX_ATTEMPTS = 20;

/** `20240501T101502Z`: sortable, and free of characters a path or git ref would mind. */
export function quarantineStamp(wallMs: number): string {
  return new Date(wallMs).toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
}

/**
 * Moves a planted file or directory aside in place (`<name>.sandboxd-quarantine-<time>`): a rename
 * within its directory works whoever owns the file (a root container's), keeps it for the user to
 * inspect, and git never reads it under that name. Where the right content is known (a worktree's
 * `commondir`), it is written back in its place.
 */
export async function quarantine(finding: Finding, stamp: string): Promise<Quarantined> {
  let movedTo: string | null = null;
  let error: string | null = null;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS && movedTo === null; attempt += 1) {
    const target = `${finding.path}${QUARANTINE_SUFFIX}${stamp}${attempt === 1 ? '' : `-${attempt}`}`;
    try {
      await fs.lstat(target);
      continue;
    } catch {
      // free: take it
    }
    try {
      await fs.rename(finding.path, target);
      movedTo = target;
    } catch (cause) {
      const code = (cause as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return { finding, movedTo: null, restored: false, error: null };
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') {
        error = (cause as Error).message;
        break;
      }
    }
  }
  if (movedTo === null) return { finding, movedTo, restored: false, error: error ?? 'no free name to move it to' };
  if (finding.restore === null) return { finding, movedTo, restored: false, error: null };
  const temp = path.join(path.dirname(finding.path), `.${path.basename(finding.path)}.sandboxd-restore`);
  try {
    await fs.writeFile(temp, finding.restore, { mode: 0o644, flag: 'wx' });
    await fs.rename(temp, finding.path);
    return { finding, movedTo, restored: true, error: null };
  } catch (cause) {
    await fs.rm(temp, { force: true }).catch(() => undefined);
    return { finding, movedTo, restored: false, error: `moved aside, but could not write it back: ${(cause as Error).message}` };
  }
}
