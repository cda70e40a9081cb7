import { promises as fs } from 'node:fs';

/**
 * Removes a file that may already be gone. One unlink: `fs.rm(file, { force: true })` first
 * lstats it twice (its option check, then rimraf), three thread-pool hops on every release.
 */
export async function removeFile(file: string): Promise<void> {
  try {
    await fs.unlink(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
