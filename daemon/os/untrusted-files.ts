import { closeSync, constants, fstatSync, lstatSync, openSync, promises as fs, readSync, type Dirent, type Stats } from 'node:fs';

/**
 * The only ways the daemon reads files a container may have written (the sandbox's git dir, a
 * work tree) or that decide a repository's layout. Nothing here follows a symbolic link at the
 * last component, and nothing opens what is not a regular file: a FIFO would block the daemon, a
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

/**
 * `lstat` with a synchronous call, null when it fails in any way (as `lstatOrNull(file).catch(() =>
 * null)`): for the daemon's look worker (daemon/os/look-worker.ts) and never its main thread. A
 * file that is not there is answered without an exception (they cost more than the call).
 */
export function lstatSyncOrNull(file: string): Stats | null {
  try {
    return lstatSync(file, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null;
  }
}

export class NotARegularFile extends Error {
  override readonly name: string = 'NotARegularFile';
}

/** A regular file past the reader's bound: refused, but not a file that is absent or of another kind. */
export class FileTooLarge extends NotARegularFile {
  override readonly name = 'FileTooLarge';
}

// O_NONBLOCK: opening a FIFO that appeared since the lstat returns at once instead of waiting for a
// writer. O_NOFOLLOW: a symbolic link swapped in since the lstat fails the open.
export const UNTRUSTED_OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * Opens a file for reading only if it is a regular file of at most `maxBytes`, checked on the open
 * descriptor, so a file replaced between a caller's lstat and this open is refused, not followed.
 */
export async function openRegularFile(file: string, maxBytes: number): Promise<{ handle: fs.FileHandle; stat: Stats }> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, UNTRUSTED_OPEN_FLAGS);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new NotARegularFile(`${file} is a symbolic link`);
    throw error;
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new NotARegularFile(`${file} is not a regular file`);
    if (stat.size > maxBytes) throw new FileTooLarge(`${file} is larger than ${maxBytes} bytes`);
    return { handle, stat };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/** The bytes of a regular file of at most `maxBytes` (see openRegularFile); a file that grows past it is refused. */
export async function readControlBytes(file: string, maxBytes: number): Promise<Buffer> {
  const { handle, stat } = await openRegularFile(file, maxBytes);
  try {
    // One byte more than allowed: a file that grew since the fstat is refused, not cut short.
    const buffer = Buffer.alloc(Math.min(maxBytes, stat.size) + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > maxBytes) throw new FileTooLarge(`${file} is larger than ${maxBytes} bytes`);
    return buffer.subarray(0, length);
  } finally {
    await handle.close();
  }
}

/** The text of a small control file (`commondir`, `gitdir`, a `.git` file, a config, a ref). */
export async function readControlFile(file: string, maxBytes: number): Promise<string> {
  return (await readControlBytes(file, maxBytes)).toString('utf8');
}

/**
 * readControlBytes with synchronous calls, for the daemon's look worker (daemon/os/look-worker.ts)
 * and never its main thread: the same open flags, the same checks on the open descriptor, the same
 * bound and the same refusals.
 */
export function readControlBytesSync(file: string, maxBytes: number): Buffer {
  let fd: number;
  try {
    fd = openSync(file, UNTRUSTED_OPEN_FLAGS);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new NotARegularFile(`${file} is a symbolic link`);
    throw error;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new NotARegularFile(`${file} is not a regular file`);
    if (stat.size > maxBytes) throw new FileTooLarge(`${file} is larger than ${maxBytes} bytes`);
    const buffer = Buffer.alloc(Math.min(maxBytes, stat.size) + 1);
    let length = 0;
    while (length < buffer.length) {
      const bytesRead = readSync(fd, buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > maxBytes) throw new FileTooLarge(`${file} is larger than ${maxBytes} bytes`);
    return buffer.subarray(0, length);
  } finally {
    closeSync(fd);
  }
}

/** A control file's text, or why it could not be read: what a look worker's answer carries back. */
export type ControlRead = { text: string } | { error: string };

function readFailure(error: unknown): ControlRead {
  return { error: error instanceof Error ? error.message : String(error) };
}

/** readControlFile's text, or its error's message. */
export async function readControlResult(file: string, maxBytes: number): Promise<ControlRead> {
  try {
    return { text: await readControlFile(file, maxBytes) };
  } catch (error) {
    return readFailure(error);
  }
}

/** readControlResult with synchronous calls (readControlBytesSync's rule: the look worker only). */
export function readControlResultSync(file: string, maxBytes: number): ControlRead {
  try {
    return { text: readControlBytesSync(file, maxBytes).toString('utf8') };
  } catch (error) {
    return readFailure(error);
  }
}

/** A directory's entries with their types (no stat per entry); nothing when it is not a directory. */
export async function listDir(dir: string): Promise<Dirent[]> {
  try {
    return await fs.readdir(dir, { withFileTypes: true });
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
