import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import type { Platform } from '../shared/paths.js';

/**
 * Tells whether a pid is still the process we saw. A start time recorded with the pid guards
 * against the pid being reused by an unrelated process after the original one died.
 */
export interface ProcessProbe {
  startTime(pid: number): Promise<string | null>;
  isSame(pid: number, startTime: string | null): Promise<boolean>;
}

export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function linuxStartTime(pid: number): Promise<string | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // comm (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

async function darwinStartTime(pid: number): Promise<string | null> {
  const result = await execa('ps', ['-o', 'lstart=', '-p', String(pid)], { reject: false, timeout: 2000 });
  const value = result.stdout.trim();
  return result.exitCode === 0 && value !== '' ? value : null;
}

export function createProcessProbe(platform: Platform): ProcessProbe {
  const startTime = platform === 'linux' ? linuxStartTime : darwinStartTime;
  return {
    startTime,
    async isSame(pid, expected) {
      if (!pidExists(pid)) return false;
      if (expected === null) return true;
      const current = await startTime(pid);
      return current === null || current === expected;
    },
  };
}

/** The command line of a live pid (null when gone), to check a recorded pid is still ours. */
export async function commandLine(pid: number, platform: Platform): Promise<string | null> {
  if (!pidExists(pid)) return null;
  if (platform === 'linux') {
    try {
      const raw = await readFile(`/proc/${pid}/cmdline`, 'utf8');
      return raw === '' ? null : raw.split('\0').join(' ');
    } catch {
      return null;
    }
  }
  const result = await execa('ps', ['-o', 'command=', '-p', String(pid)], { reject: false, timeout: 2000 });
  return result.exitCode === 0 ? result.stdout.trim() : null;
}
