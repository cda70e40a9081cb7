import { constants, promises as fs } from 'node:fs';
import path from 'node:path';

export async function isExecutableFile(file: string): Promise<boolean> {
  try {
    await fs.access(file, constants.X_OK);
    return (await fs.stat(file)).isFile();
  } catch {
    return false;
  }
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
