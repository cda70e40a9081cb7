import path from 'node:path';
import { FileTooLarge, identity, listDir, lstatOrNull, NotARegularFile, readControlBytes, readControlFile } from '../os/untrusted-files.js';
import { isObjectId, isValidRefName, type HexLength } from './ref-names.js';
import { SyncBound } from './sync-bound.js';

/**
 * The refs of a git dir the sandbox writes, read by the daemon itself, never through git run
 * there: every file is opened without following a symbolic link and without blocking on a FIFO,
 * must be a regular file of bounded size, and must hold what git writes (an object id, or a
 * `ref: <name>` in HEAD). Names are checked as `git check-ref-format` does. What is anything else
 * is left out, never followed.
 */

export type Head = { kind: 'branch'; ref: string } | { kind: 'detached'; oid: string };

/** A loose ref as last read: its value, and the file's identity then (so an unchanged file is not read again). */
export interface LooseRef {
  oid: string;
  identity: string;
}

/** The refs sandboxd brings home: branches, tags and the stash. */
export const SYNCED_PREFIXES = ['refs/heads/', 'refs/tags/'] as const;
export const STASH_REF = 'refs/stash';

export function isSyncedRef(name: string): boolean {
  return name === STASH_REF || SYNCED_PREFIXES.some((prefix) => name.startsWith(prefix));
}

/** Git's refs are short; anything longer is not one git wrote. */
const REF_FILE_MAX_BYTES = 1024;
/** Deeper than any branch name a person types. */
const MAX_REF_DEPTH = 32;

export interface RefBounds {
  /** Entries (files and directories) looked at under refs/heads, refs/tags. */
  maxEntries: number;
}

/** `ref: refs/heads/x` or an object id; null for anything else (missing, a link, a FIFO, garbage). */
export async function readHead(file: string, hexLength: HexLength): Promise<Head | null> {
  let text: string;
  try {
    text = (await readControlFile(file, REF_FILE_MAX_BYTES)).trim();
  } catch {
    return null;
  }
  const symref = /^ref: (.+)$/.exec(text)?.[1];
  if (symref !== undefined) return symref.startsWith('refs/heads/') && isValidRefName(symref) ? { kind: 'branch', ref: symref } : null;
  return isObjectId(text, hexLength) ? { kind: 'detached', oid: text } : null;
}

/** A name read from a directory listing, as git would spell the ref; null when git could not have written it. */
function refName(parent: string, entry: string): string | null {
  // A name that is not valid UTF-8 reads back with U+FFFD: it names another file than the one listed.
  if (entry.includes('\uFFFD')) return null;
  const name = `${parent}/${entry}`;
  return isValidRefName(name) ? name : null;
}

/**
 * The loose refs under refs/heads, refs/tags and refs/stash of `gitDir`. `known` holds what an
 * earlier read found: a file with the same identity is not read again. Past `maxEntries` the read
 * fails closed (SyncBound).
 */
export async function readLooseRefs(gitDir: string, hexLength: HexLength, known: ReadonlyMap<string, LooseRef>, bounds: RefBounds): Promise<Map<string, LooseRef>> {
  const found = new Map<string, LooseRef>();
  let entries = 0;
  const file = async (name: string): Promise<void> => {
    const full = path.join(gitDir, name);
    const stat = await lstatOrNull(full).catch(() => null);
    if (stat?.isFile() !== true) return;
    const id = `${identity(stat)}:${stat.size}:${stat.mtimeMs}`;
    const previous = known.get(name);
    if (previous?.identity === id) {
      found.set(name, previous);
      return;
    }
    let text: string;
    try {
      text = (await readControlFile(full, REF_FILE_MAX_BYTES)).trim();
    } catch {
      return;
    }
    if (isObjectId(text, hexLength)) found.set(name, { oid: text, identity: id });
  };
  let pending: { dir: string; name: string; depth: number }[] = SYNCED_PREFIXES.map((prefix) => ({ dir: path.join(gitDir, prefix), name: prefix.slice(0, -1), depth: 0 }));
  while (pending.length > 0) {
    const next: typeof pending = [];
    for (const { dir, name, depth } of pending) {
      for (const child of await listDir(dir)) {
        entries += 1;
        if (entries > bounds.maxEntries) throw new SyncBound(`the sandbox's git dir holds more than ${bounds.maxEntries} branches, tags and directories of them`);
        const childName = refName(name, child.name);
        if (childName === null) continue;
        if (child.isDirectory()) {
          if (depth + 1 < MAX_REF_DEPTH) next.push({ dir: path.join(dir, child.name), name: childName, depth: depth + 1 });
        } else if (child.isFile()) {
          await file(childName);
        }
      }
    }
    pending = next;
  }
  await file(STASH_REF);
  return found;
}

/**
 * Bytes of a packed-refs parsed between two turns of the event loop: a repository with a hundred
 * thousand refs has a packed-refs of hundreds of MB, which parsed in one go would hold up every
 * other request for seconds.
 */
const PARSE_SLICE_BYTES = 512 * 1024;

function parseLinesInto(refs: Map<string, string>, text: string, hexLength: HexLength): void {
  let at = 0;
  while (at < text.length) {
    let end = text.indexOf('\n', at);
    if (end === -1) end = text.length;
    const line = text.slice(at, end);
    at = end + 1;
    const space = line.indexOf(' ');
    if (space !== hexLength) continue;
    const oid = line.slice(0, space);
    const name = line.slice(space + 1);
    if (isSyncedRef(name) && isObjectId(oid, hexLength) && isValidRefName(name)) refs.set(name, oid);
  }
}

/** `packed-refs`: `<oid> <name>` lines (peeled `^<oid>` lines and the header skipped); only synced names kept. */
export function parsePackedRefs(bytes: Buffer, hexLength: HexLength): Map<string, string> {
  const refs = new Map<string, string>();
  parseLinesInto(refs, bytes.toString('utf8'), hexLength);
  return refs;
}

/**
 * The same, a slice of whole lines at a time, `turn` awaited between slices (a newline byte is
 * never inside a UTF-8 sequence, so each slice decodes on its own).
 */
export async function parsePackedRefsInSlices(bytes: Buffer, hexLength: HexLength, turn: () => Promise<void> = nextTurn, sliceBytes = PARSE_SLICE_BYTES): Promise<Map<string, string>> {
  const refs = new Map<string, string>();
  let at = 0;
  while (at < bytes.length) {
    const newline = at + sliceBytes >= bytes.length ? -1 : bytes.indexOf(0x0a, at + sliceBytes);
    const end = newline === -1 ? bytes.length : newline + 1;
    parseLinesInto(refs, bytes.toString('utf8', at, end), hexLength);
    at = end;
    if (at < bytes.length) await turn();
  }
  return refs;
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The identity of a file (`dev:ino:size:mtime`), or null when there is no regular file. */
export async function fileIdentity(file: string): Promise<string | null> {
  const stat = await lstatOrNull(file).catch(() => null);
  return stat?.isFile() === true ? `${identity(stat)}:${stat.size}:${stat.mtimeMs}` : null;
}

/**
 * A `packed-refs` the sandbox may have written: null when there is none, or something that is not
 * a regular file (git would not read it either). Larger than the bound fails closed.
 */
export async function readPackedRefs(file: string, hexLength: HexLength, maxBytes: number): Promise<Map<string, string> | null> {
  try {
    return await parsePackedRefsInSlices(await readControlBytes(file, maxBytes), hexLength);
  } catch (error) {
    if (error instanceof FileTooLarge) throw new SyncBound(`the sandbox's ${path.basename(file)} is larger than ${maxBytes} bytes`);
    if (error instanceof NotARegularFile) return null;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EACCES' || code === 'EPERM') return null;
    throw error;
  }
}
