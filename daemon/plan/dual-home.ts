import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';

export interface HomeFile {
  /** Where the host user's tools look for it. */
  path: string;
  /** Canonical mount source. */
  source: string;
}

/**
 * Mounts a host-home file or directory at its host path and, when it lives under the host HOME,
 * at the same place under the container user's HOME (once when the two homes are equal).
 */
export function dualHomeMounts(file: HomeFile, hostHome: string, containerHome: string, base: Pick<Mount, 'readOnly' | 'purpose' | 'relabel'>): Mount[] {
  const mounts: Mount[] = [{ source: file.source, target: file.path, readOnly: base.readOnly, purpose: base.purpose, relabel: base.relabel }];
  const relative = path.relative(hostHome, file.path);
  if (!relative.startsWith('..') && !path.isAbsolute(relative) && containerHome !== hostHome) {
    mounts.push({ source: file.source, target: path.join(containerHome, relative), readOnly: base.readOnly, purpose: base.purpose, relabel: base.relabel });
  }
  return mounts;
}
