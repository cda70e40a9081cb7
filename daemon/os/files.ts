import { promises as fs } from 'node:fs';
import path from 'node:path';

/** Temp files are this process's and numbered: two writes of one file never share one. */
let tempFiles = 0;

export interface AtomicWriteOptions {
  /**
   * fsync before the rename (default true). Without it the file is still whole after a crash of
   * this process (the kernel keeps what was written); only a power loss can lose the last version.
   */
  durable?: boolean;
}

/** write-to-temp + fsync + rename, so a crash leaves either the old or the new file, never half. */
export async function writeFileAtomic(file: string, data: string, mode: number, options: AtomicWriteOptions = {}): Promise<void> {
  tempFiles += 1;
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${tempFiles}.tmp`);
  const handle = await fs.open(temp, 'w', mode);
  try {
    try {
      await handle.writeFile(data);
      if (options.durable ?? true) await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temp, file);
  } catch (error) {
    // A full disk fails the write: its temp file must not stay behind taking space.
    await removeFile(temp);
    throw error;
  }
}

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
