import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '../../daemon/os/logger.js';
import { readRecordFile } from '../../daemon/os/record-file.js';
import { readStateFile } from '../../daemon/os/state-file.js';
import * as z from 'zod/mini';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

function dir(): string {
  const made = mkdtempSync('/tmp/sbx-state-');
  cleanup.add(() => {
    rmSync(made, { recursive: true, force: true });
  });
  return made;
}

/** A logger that keeps what was said. */
function recorder(): { logger: Logger; lines: unknown[] } {
  const lines: unknown[] = [];
  const logger = { warn: (fields: unknown, message: string) => lines.push({ fields, message }) } as unknown as Logger;
  return { logger, lines };
}

describe('readStateFile: a state file is a regular file of ours, or no state', () => {
  it('reads a regular file; a missing one is no state', async () => {
    const base = dir();
    writeFileSync(path.join(base, 'a.json'), '{"version":1}');
    expect(await readStateFile(path.join(base, 'a.json'))).toBe('{"version":1}');
    expect(await readStateFile(path.join(base, 'missing.json'))).toBeNull();
    expect(await readStateFile(path.join(base, 'no-dir', 'x.json'))).toBeNull();
  });

  it.each([
    ['a FIFO', (file: string) => execFileSync('mkfifo', [file]), 'a FIFO'],
    ['a directory', (file: string) => { mkdirSync(file); }, 'a directory'],
    ['a symlink to a regular file', (file: string) => {
      writeFileSync(path.join(path.dirname(file), 'target'), '{"version":1}');
      symlinkSync(path.join(path.dirname(file), 'target'), file);
    }, 'a symlink'],
    ['a symlink to a device', (file: string) => { symlinkSync('/dev/zero', file); }, 'a symlink'],
    ['an oversized file', (file: string) => { writeFileSync(file, 'x'.repeat(2048)); }, '2048 bytes, more than 1024'],
  ])('refuses %s at once (never waits for a writer), logs it and moves it aside', async (_name, make, found) => {
    const base = dir();
    const file = path.join(base, 'helpers.json');
    make(file);
    const { logger, lines } = recorder();
    expect(await readStateFile(file, { logger, moveAside: true, maxBytes: 1024 })).toBeNull();
    expect(lines).toEqual([{ fields: expect.objectContaining({ file, found }) as unknown, message: expect.stringContaining('not a regular file') as string }]);
    expect(readdirSync(base).filter((name) => name.startsWith('helpers.json'))).toEqual([expect.stringMatching(/^helpers\.json\.refused-\d+$/) as string]);
  });

  it('refuses a device opened by its own name without blocking, and leaves what it does not own where it is', async () => {
    const { logger, lines } = recorder();
    expect(await readStateFile('/dev/zero', { logger })).toBeNull();
    expect(lines).toHaveLength(1);
  });

  it('follows a symlink only when asked (a user\'s dotfiles), and still refuses a FIFO behind it', async () => {
    const base = dir();
    writeFileSync(path.join(base, 'target'), 'text');
    symlinkSync(path.join(base, 'target'), path.join(base, 'link'));
    expect(await readStateFile(path.join(base, 'link'), { followSymlink: true })).toBe('text');
    execFileSync('mkfifo', [path.join(base, 'fifo')]);
    symlinkSync(path.join(base, 'fifo'), path.join(base, 'to-fifo'));
    expect(await readStateFile(path.join(base, 'to-fifo'), { followSymlink: true })).toBeNull();
  });

  it('readRecordFile starts afresh from a FIFO: no records, and the next write finds a regular name', async () => {
    const base = dir();
    const file = path.join(base, 'helpers.json');
    execFileSync('mkfifo', [file]);
    const { logger } = recorder();
    expect(await readRecordFile(file, 'helpers', 10, z.string(), logger)).toEqual([]);
    expect(readdirSync(base)).toEqual([expect.stringMatching(/^helpers\.json\.refused-\d+$/) as string]);
  });
});
