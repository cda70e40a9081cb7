import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { ROOT } from '../helpers.js';

/** Where a container finds the holder (mounted read-only from the host). */
export const HOLDER_IN_CONTAINER = '/usr/bin/holder';

/**
 * Builds `holder.c` (static) into `dir`; answers the `run` flags that mount it into a container.
 * A static binary runs in any lab image, root or not, uid-mapped or not.
 */
export function buildHolder(dir: string): string[] {
  const binary = path.join(dir, 'holder');
  execFileSync('cc', ['-static', '-Os', '-Wall', '-Wextra', '-Werror', '-o', binary, path.join(ROOT, 'test', 'lab', 'holder.c')]);
  return ['-v', `${binary}:${HOLDER_IN_CONTAINER}:ro`];
}
