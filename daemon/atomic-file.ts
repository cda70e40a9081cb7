import { promises as fs } from 'node:fs';
import path from 'node:path';

/** write-to-temp + fsync + rename, so a crash leaves either the old or the new file, never half. */
export async function writeFileAtomic(file: string, data: string, mode: number): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${Date.now()}.tmp`);
  const handle = await fs.open(temp, 'w', mode);
  try {
    await handle.writeFile(data);
    await handle.sync();
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
