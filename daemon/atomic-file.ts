import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';

export interface AtomicWriteOptions {
  /**
   * fsync before the rename (default true). Without it the file is still whole after a crash of
   * this process (the kernel keeps what was written); only a power loss can lose the last version.
   */
  durable?: boolean;
}

/** write-to-temp + fsync + rename, so a crash leaves either the old or the new file, never half. */
export async function writeFileAtomic(file: string, data: string, mode: number, options: AtomicWriteOptions = {}): Promise<void> {
  // Random, so two writers of one file in the same millisecond never share a temp file.
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const handle = await fs.open(temp, 'w', mode);
  try {
    await handle.writeFile(data);
    if (options.durable ?? true) await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await fs.rename(temp, file);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
}
