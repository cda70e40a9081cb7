/**
 * The paths of the gitlinks (mode 160000) in a git index file, read without git: the host's
 * `git status` descends into each one that has a `.git`, and runs what that repository's config
 * names. Versions 2, 3 and 4 (path prefix compression); a split index names its shared index,
 * whose gitlinks count too.
 */

export interface IndexGitlinks {
  paths: string[];
  /** The hex id of the shared index (`sharedindex.<id>` beside the index), when split. */
  sharedIndex: string | null;
}

export class IndexUnreadable extends Error {
  override readonly name = 'IndexUnreadable';
}

const GITLINK = 0o160000;
const TYPE_MASK = 0o170000;
/** ctime, mtime, dev, ino, mode, uid, gid, size: 40 bytes before the object id. */
const STAT_BYTES = 40;
const EXTENDED_FLAG = 0x4000;
const NAME_MASK = 0x0fff;

/** git's `decode_varint` (index v4 prefix lengths). */
function decodeVarint(buffer: Buffer, start: number): [number, number] {
  let at = start;
  let byte = buffer[at++];
  if (byte === undefined) throw new IndexUnreadable('truncated');
  let value = byte & 127;
  while (byte & 128) {
    value += 1;
    byte = buffer[at++];
    if (byte === undefined || value > 2 ** 40) throw new IndexUnreadable('bad varint');
    value = value * 128 + (byte & 127);
  }
  return [value, at];
}

function nulAt(buffer: Buffer, from: number): number {
  const end = buffer.indexOf(0, from);
  if (end === -1) throw new IndexUnreadable('unterminated path');
  return end;
}

/** `hashBytes`: 20 for SHA-1 repositories, 32 for SHA-256 (`extensions.objectFormat`). */
export function indexGitlinks(buffer: Buffer, hashBytes: 20 | 32): IndexGitlinks {
  if (buffer.length < 12 + hashBytes || buffer.toString('latin1', 0, 4) !== 'DIRC') throw new IndexUnreadable('not an index file');
  const version = buffer.readUInt32BE(4);
  if (version < 2 || version > 4) throw new IndexUnreadable(`index version ${version}`);
  const count = buffer.readUInt32BE(8);
  const end = buffer.length - hashBytes;
  const paths: string[] = [];
  let at = 12;
  let previous: Buffer = Buffer.alloc(0);
  for (let index = 0; index < count; index += 1) {
    const headerBytes = STAT_BYTES + hashBytes + 2;
    if (at + headerBytes > end) throw new IndexUnreadable('truncated entry');
    const mode = buffer.readUInt32BE(at + 24);
    const flags = buffer.readUInt16BE(at + STAT_BYTES + hashBytes);
    let nameAt = at + headerBytes;
    if (flags & EXTENDED_FLAG) {
      if (version < 3) throw new IndexUnreadable('extended flags in a version 2 index');
      nameAt += 2;
    }
    let name: Buffer;
    if (version === 4) {
      const [strip, suffixAt] = decodeVarint(buffer, nameAt);
      if (strip > previous.length) throw new IndexUnreadable('bad prefix');
      const suffixEnd = nulAt(buffer, suffixAt);
      name = Buffer.concat([previous.subarray(0, previous.length - strip), buffer.subarray(suffixAt, suffixEnd)]);
      at = suffixEnd + 1;
    } else {
      const length = flags & NAME_MASK;
      const nameEnd = length < NAME_MASK ? nameAt + length : nulAt(buffer, nameAt);
      name = buffer.subarray(nameAt, nameEnd);
      // Entries are padded with 1-8 NULs to a multiple of 8 bytes from their start.
      at += (nameAt - at + name.length + 8) & ~7;
    }
    if (at > end) throw new IndexUnreadable('truncated entry');
    if ((mode & TYPE_MASK) === GITLINK) paths.push(name.toString('utf8'));
    previous = name;
  }
  let sharedIndex: string | null = null;
  while (at + 8 <= end) {
    const signature = buffer.toString('latin1', at, at + 4);
    const size = buffer.readUInt32BE(at + 4);
    if (signature === 'link' && size >= hashBytes) sharedIndex = buffer.toString('hex', at + 8, at + 8 + hashBytes);
    at += 8 + size;
  }
  return { paths, sharedIndex };
}
