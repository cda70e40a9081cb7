import { constants, promises as fs, watch, type Dirent, type Stats } from 'node:fs';

/**
 * The only ways the guard and the layout reader touch a repository. Everything under a git dir
 * may have been written by the container, so nothing here follows a symbolic link at the last
 * component, and nothing opens what is not a regular file: a FIFO would block the daemon, a
 * device node could do anything on open.
 */

/** `lstat`, or null when nothing is there (or a parent is not a directory). */
export async function lstatOrNull(file: string): Promise<Stats | null> {
  try {
    return await fs.lstat(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw error;
  }
}

export class NotARegularFile extends Error {
  override readonly name = 'NotARegularFile';
}

// O_NONBLOCK: opening a FIFO that appeared since the lstat returns at once instead of waiting for a
// writer. O_NOFOLLOW: a symbolic link swapped in since the lstat fails the open.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * The text of a small control file (`commondir`, `gitdir`, a `.git` file, a config). Refuses
 * anything but a regular file of at most `maxBytes`, checked on the open descriptor, so a file
 * replaced between a caller's lstat and this read is refused rather than followed.
 */
export async function readControlFile(file: string, maxBytes: number): Promise<string> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, OPEN_FLAGS);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new NotARegularFile(`${file} is a symbolic link`);
    throw error;
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new NotARegularFile(`${file} is not a regular file`);
    if (stat.size > maxBytes) throw new NotARegularFile(`${file} is larger than ${maxBytes} bytes`);
    const buffer = Buffer.alloc(maxBytes + 1);
    const { bytesRead } = await handle.read(buffer, 0, maxBytes + 1, 0);
    if (bytesRead > maxBytes) throw new NotARegularFile(`${file} is larger than ${maxBytes} bytes`);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

/** As `readControlFile`, the bytes (an index file). */
export async function readControlBytes(file: string, maxBytes: number): Promise<Buffer> {
  const handle = await fs.open(file, OPEN_FLAGS);
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new NotARegularFile(`${file} is not a regular file`);
    if (stat.size > maxBytes) throw new NotARegularFile(`${file} is larger than ${maxBytes} bytes`);
    const buffer = Buffer.alloc(stat.size);
    const { bytesRead } = await handle.read(buffer, 0, stat.size, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** What the guard renames a planted file to (`<name>.sandboxd-quarantine-<time>`). */
export const QUARANTINE_SUFFIX = '.sandboxd-quarantine-';

/**
 * A directory's entries with their types (no stat per entry); nothing when it is not a directory.
 * What the guard moved aside is left out: git never reads it under that name, and looking at it
 * again would move it aside again.
 */
export async function listDir(dir: string): Promise<Dirent[]> {
  try {
    return (await fs.readdir(dir, { withFileTypes: true })).filter((entry) => !entry.name.includes(QUARANTINE_SUFFIX));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw error;
  }
}

/** `dev:ino`: what a bind mount pins, and what a rename carries along. */
export function identity(stat: Stats): string {
  return `${stat.dev}:${stat.ino}`;
}

/**
 * Calls `onChange` on any change in `dir` (an entry created, written, renamed or removed) and when
 * the watch itself fails; null when `dir` cannot be watched (gone, or the system is out of watches).
 */
export function watchDirectory(dir: string, onChange: () => void): { close(): void } | null {
  try {
    const watcher = watch(dir, { persistent: false }, () => {
      onChange();
    });
    watcher.on('error', () => {
      watcher.close();
      onChange();
    });
    return watcher;
  } catch {
    return null;
  }
}
