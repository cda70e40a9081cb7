import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import type { Logger } from './logger.js';

/** State files hold at most a few thousand small records; anything larger is not one of ours. */
export const STATE_FILE_MAX_BYTES = 8 * 1024 * 1024;

/** Never follows a symlink (ELOOP), never waits for a FIFO's writer or a device (O_NONBLOCK); libuv adds O_CLOEXEC. */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

export interface StateFileOptions {
  /** Refuses a file larger than this (default STATE_FILE_MAX_BYTES). */
  maxBytes?: number;
  /** Told what was refused and why; without one the refusal is silent (a client's read). */
  logger?: Logger;
  /**
   * Moves what was refused aside (`<name>.refused-<time>`) so the state starts afresh and the next
   * write is a regular file again. Only for files the caller writes itself.
   */
  moveAside?: boolean;
  /** Follows a symlink at the last component (a user's own config, kept in dotfiles); never for state. */
  followSymlink?: boolean;
}

function kindOf(stat: { isFIFO(): boolean; isDirectory(): boolean; isCharacterDevice(): boolean; isBlockDevice(): boolean; isSocket(): boolean }): string {
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isDirectory()) return 'a directory';
  if (stat.isCharacterDevice() || stat.isBlockDevice()) return 'a device';
  if (stat.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * Reads a state or record file the daemon keeps (DESIGN §9: inputs are untrusted, and a file in
 * the state dir may be anything a bug or another program left): the text of a regular file, or
 * null when there is none. A symlink, FIFO, device, directory or an oversized file is refused with
 * a log line, and its state starts afresh; nothing here can hang on what it finds.
 */
export async function readStateFile(file: string, options: StateFileOptions = {}): Promise<string | null> {
  const maxBytes = options.maxBytes ?? STATE_FILE_MAX_BYTES;
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, options.followSymlink === true ? OPEN_FLAGS & ~constants.O_NOFOLLOW : OPEN_FLAGS);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    // O_NOFOLLOW on a symlink (Linux ELOOP, BSDs EMLINK); anything else cannot be read either.
    await refuse(file, code === 'ELOOP' || code === 'EMLINK' ? 'a symlink' : `unreadable (${code ?? 'error'})`, options);
    return null;
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) {
      await handle.close();
      await refuse(file, kindOf(stat), options);
      return null;
    }
    if (stat.size > maxBytes) {
      await handle.close();
      await refuse(file, `${String(stat.size)} bytes, more than ${String(maxBytes)}`, options);
      return null;
    }
    // A regular file never blocks; the bound holds even if it grows while it is read.
    const buffer = Buffer.alloc(Math.min(maxBytes, stat.size) + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    await handle.close();
    if (length > maxBytes) {
      await refuse(file, `more than ${String(maxBytes)} bytes`, options);
      return null;
    }
    return buffer.subarray(0, length).toString('utf8');
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
}

async function refuse(file: string, what: string, options: StateFileOptions): Promise<void> {
  let movedTo: string | null = null;
  if (options.moveAside === true) {
    const aside = path.join(path.dirname(file), `${path.basename(file)}.refused-${String(Date.now())}`);
    // rename() acts on the name itself: a symlink, FIFO or device is moved, never opened.
    movedTo = await fs.rename(file, aside).then(
      () => aside,
      () => null,
    );
  }
  options.logger?.warn({ file, found: what, movedTo }, 'state file is not a regular file of ours; starting that state afresh');
}
