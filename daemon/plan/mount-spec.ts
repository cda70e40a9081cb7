import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { Mount } from '../../shared/contracts/plan.js';

export interface MountSpec {
  source: string;
  target: string;
  readOnly: boolean;
}

function invalid(entry: string, why: string): SandboxdError {
  return new SandboxdError('INVALID_MOUNT', `mount "${entry}" ${why}`);
}

/** `path`, `path:ro|rw`, `src:dst`, `src:dst:ro|rw`; read-only unless `rw` is given. */
export function parseMountSpec(entry: string): MountSpec {
  if (entry.includes(',') || entry.includes('\0') || entry.includes('\n')) throw invalid(entry, 'contains a comma or control character');
  const parts = entry.split(':');
  let mode: string | undefined;
  if (parts.length > 1 && (parts.at(-1) === 'ro' || parts.at(-1) === 'rw')) mode = parts.pop();
  if (parts.length > 2) throw invalid(entry, 'has more than source:target[:ro|rw]; paths may not contain ":"');
  const [source = '', target = source] = parts;
  for (const value of [source, target]) {
    if (value === '') throw invalid(entry, 'has an empty path');
    if (!path.isAbsolute(value)) throw invalid(entry, `is not absolute ("${value}")`);
    if (value.split('/').includes('..')) throw invalid(entry, `contains ".." ("${value}")`);
  }
  return { source, target: path.resolve(target), readOnly: mode !== 'rw' };
}

/** Canonical source (realpath); a source that does not exist is rejected, never created. */
export async function resolveMountSpecs(entries: readonly string[], relabel: Mount['relabel']): Promise<Mount[]> {
  const mounts: Mount[] = [];
  for (const entry of entries) {
    const spec = parseMountSpec(entry);
    let source: string;
    try {
      source = await fs.realpath(spec.source);
    } catch {
      throw invalid(entry, `names ${spec.source}, which does not exist`);
    }
    if (source.includes(':') || source.includes(',')) throw invalid(entry, `resolves to ${source}, which contains ":" or ","`);
    mounts.push({ source, target: spec.target, readOnly: spec.readOnly, purpose: 'requested mount', relabel });
  }
  return mounts;
}

/** Existing, canonical; silently skipped when absent (optional mounts like cloud credentials). */
export async function canonicalIfExists(file: string): Promise<string | null> {
  try {
    return await fs.realpath(file);
  } catch {
    return null;
  }
}
