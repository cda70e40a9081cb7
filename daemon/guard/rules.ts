import path from 'node:path';
import { disallowedEntries, type ConfigContext } from './config-rules.js';
import { parseConfigText } from './config-text.js';
import { readControlFile } from './fs-edge.js';
import type { Entry } from './git-dir.js';

/** Something in a control position the host's git must not use; it is moved aside. */
export interface Finding {
  path: string;
  why: string;
  /** Written in its place once it is moved aside (a worktree's `commondir` is known to be `../..`). */
  restore: string | null;
  /** Maybe git half-way through writing it (see `halfWritten`): acted on only once it stays so. */
  halfWritten?: true;
}

/**
 * Git creates a `.git` file or a worktree's `commondir` and then writes it, so a check can find
 * one empty while git runs normally. Empty, it is harmless (git refuses to read it), so it is
 * looked at again once it has had time to settle rather than acted on at once. Only empty by
 * both the lstat and the read counts: a lone newline in `commondir` would make git take the admin
 * dir itself, which the sandbox writes, as the common dir.
 */
export function halfWritten(entry: Entry, text: string | null): { halfWritten?: true } {
  return entry.kind === 'file' && entry.size === 0 && text === '' ? { halfWritten: true } : {};
}

/**
 * Whether a file may have been written by a sandbox: changed (ctime) at or after the cutoff, and
 * not held read-only by every session's plan. A sandbox cannot set a file's ctime back.
 */
export interface Trust {
  cutoffMs: number;
  /** Read-only in every live session's plan, with the identity its directory had then. */
  isProtected(file: string): Promise<boolean>;
}

export async function mayBePlanted(entry: Entry, trust: Trust): Promise<boolean> {
  return entry.ctimeMs >= trust.cutoffMs && !(await trust.isProtected(entry.path));
}

/** Big enough for any config git writes; a larger one is a finding in itself. */
const NEW_CONFIG_MAX_BYTES = 256 * 1024;

/** A config file that may have been planted: it may hold only keys git writes by itself. */
export async function configFinding(entry: Entry, context: ConfigContext): Promise<Finding | null> {
  if (entry.kind !== 'file') return { path: entry.path, why: `is a ${entry.kind === 'symlink' ? 'symbolic link' : 'special file'} where git reads its config`, restore: null };
  let text: string;
  try {
    text = await readControlFile(entry.path, NEW_CONFIG_MAX_BYTES);
  } catch (error) {
    return { path: entry.path, why: `cannot be read as a config (${(error as Error).message})`, restore: null };
  }
  const parsed = parseConfigText(text);
  if (parsed.error !== null) return { path: entry.path, why: `is not a config git reads (line ${parsed.error.line})`, restore: null };
  const reasons = disallowedEntries(parsed.entries, context);
  return reasons.length === 0 ? null : { path: entry.path, why: `sets ${reasons.join('; ')}`, restore: null };
}

/** Hooks git never runs: the samples `git init` and `git clone` copy. */
export function isSampleHook(name: string): boolean {
  return name.endsWith('.sample');
}

/** A worktree's `commondir` must lead back to its own repository; git writes `../..`. */
export function commondirLeadsHome(admin: string, text: string | null, commonDir: string): boolean {
  return text !== null && (text === '../..' || text === '../../' || path.resolve(admin, text) === commonDir);
}
