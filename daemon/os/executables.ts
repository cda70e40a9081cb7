import { access, constants, stat } from 'node:fs';
import path from 'node:path';

/**
 * The callback API on purpose: the CLI finds engines on every `status`, and `node:fs/promises`
 * would load a module a command that only asks the daemon never needs.
 */
export function isExecutableFile(file: string): Promise<boolean> {
  return new Promise((resolve) => {
    access(file, constants.X_OK, (denied) => {
      if (denied !== null) {
        resolve(false);
        return;
      }
      stat(file, (error, stats) => {
        resolve(error === null && stats.isFile());
      });
    });
  });
}

/**
 * `which`, against a PATH the caller names (a session's, never the daemon's: DESIGN §4). Only
 * absolute entries count: a relative one would resolve against whatever the cwd happens to be.
 */
export async function findExecutable(name: string, searchPath: string | undefined): Promise<string | null> {
  for (const dir of (searchPath ?? '').split(path.delimiter)) {
    if (!path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return null;
}
