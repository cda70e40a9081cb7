import { promises as fs } from 'node:fs';

/** The daemon's pid file: its pid and start time, so a reused pid is told apart. */
export interface PidRecord {
  pid: number;
  startTime: string | null;
}

/** Clients read it too (`stop`, auto-start), so it lives apart from the lock and its library. */
export async function readPidRecord(pidPath: string): Promise<PidRecord | null> {
  try {
    const parsed = JSON.parse(await fs.readFile(pidPath, 'utf8')) as Partial<PidRecord>;
    return typeof parsed.pid === 'number' ? { pid: parsed.pid, startTime: parsed.startTime ?? null } : null;
  } catch {
    return null;
  }
}
