import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePackedRefs, readHead, readLooseRefs, readPackedRefs } from '../../daemon/gitsync/sandbox-refs.js';
import { SyncBound } from '../../daemon/gitsync/sync-bound.js';

/**
 * The daemon reads the sandbox's refs itself, as a container may have left them: a symbolic link
 * to a host file, a FIFO, garbage, a flood of names. Nothing is followed, nothing blocks, bounds
 * fail closed.
 */
const A = 'a'.repeat(40);
const B = 'b'.repeat(40);
let root = '';
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), 'sbx-refs-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function gitDir(name: string): string {
  const dir = path.join(root, name);
  mkdirSync(path.join(dir, 'refs', 'heads'), { recursive: true });
  mkdirSync(path.join(dir, 'refs', 'tags'), { recursive: true });
  return dir;
}

describe('readHead', () => {
  it('reads a branch or a detached id, and nothing else', async () => {
    const dir = gitDir('head');
    const head = path.join(dir, 'HEAD');
    writeFileSync(head, 'ref: refs/heads/main\n');
    expect(await readHead(head, 40)).toEqual({ kind: 'branch', ref: 'refs/heads/main' });
    writeFileSync(head, `${A}\n`);
    expect(await readHead(head, 40)).toEqual({ kind: 'detached', oid: A });
    for (const text of ['ref: refs/heads/x;touch${IFS}/tmp/p;\n', 'ref: refs/heads/../../config\n', 'ref: refs/remotes/origin/main\n', 'garbage\n', `${A.toUpperCase()}\n`]) {
      writeFileSync(head, text);
      expect({ text, head: await readHead(head, 40) }).toEqual({ text, head: text.includes('${IFS}') ? { kind: 'branch', ref: 'refs/heads/x;touch${IFS}/tmp/p;' } : null });
    }
  });

  it('never follows a symbolic link and never blocks on a FIFO', async () => {
    const dir = gitDir('head-odd');
    const target = path.join(root, 'secret');
    writeFileSync(target, 'ref: refs/heads/main\n');
    symlinkSync(target, path.join(dir, 'HEAD'));
    expect(await readHead(path.join(dir, 'HEAD'), 40)).toBeNull();
    const fifo = path.join(gitDir('head-fifo'), 'HEAD');
    execFileSync('mkfifo', [fifo]);
    expect(await readHead(fifo, 40)).toBeNull();
  });
});

describe('readLooseRefs', () => {
  it('reads branches, tags and the stash; leaves out links, FIFOs, bad names and bad values', async () => {
    const dir = gitDir('loose');
    writeFileSync(path.join(dir, 'refs', 'heads', 'main'), `${A}\n`);
    mkdirSync(path.join(dir, 'refs', 'heads', 'feature'));
    writeFileSync(path.join(dir, 'refs', 'heads', 'feature', 'x'), `${B}\n`);
    writeFileSync(path.join(dir, 'refs', 'tags', 'v1'), `${A}\n`);
    writeFileSync(path.join(dir, 'refs', 'stash'), `${B}\n`);
    symlinkSync(path.join(dir, 'refs', 'heads', 'main'), path.join(dir, 'refs', 'heads', 'linked'));
    execFileSync('mkfifo', [path.join(dir, 'refs', 'heads', 'fifo')]);
    writeFileSync(path.join(dir, 'refs', 'heads', 'bad.lock'), `${A}\n`);
    writeFileSync(path.join(dir, 'refs', 'heads', 'garbage'), 'not an id\n');
    writeFileSync(path.join(dir, 'refs', 'heads', 'huge'), `${A}\n${' '.repeat(2000)}`);
    symlinkSync(root, path.join(dir, 'refs', 'heads', 'dirlink'));
    mkdirSync(path.join(dir, 'refs', 'remotes', 'origin'), { recursive: true });
    writeFileSync(path.join(dir, 'refs', 'remotes', 'origin', 'main'), `${B}\n`);
    const refs = await readLooseRefs(dir, 40, new Map(), { maxEntries: 100 });
    expect(Object.fromEntries([...refs].map(([name, ref]) => [name, ref.oid]))).toEqual({
      'refs/heads/main': A,
      'refs/heads/feature/x': B,
      'refs/tags/v1': A,
      'refs/stash': B,
    });
    // An unchanged file is not read again: its identity is what was known.
    const again = await readLooseRefs(dir, 40, new Map([['refs/heads/main', { oid: B, identity: refs.get('refs/heads/main')?.identity ?? '' }]]), { maxEntries: 100 });
    expect(again.get('refs/heads/main')?.oid).toBe(B);
  });

  it('fails closed past its bound', async () => {
    const dir = gitDir('flood');
    for (let index = 0; index < 30; index += 1) writeFileSync(path.join(dir, 'refs', 'heads', `b${String(index)}`), `${A}\n`);
    await expect(readLooseRefs(dir, 40, new Map(), { maxEntries: 20 })).rejects.toBeInstanceOf(SyncBound);
  });
});

describe('packed-refs', () => {
  it('keeps synced names with valid ids, skips peeled lines, the header and everything else', () => {
    const text = ['# pack-refs with: peeled fully-peeled sorted ', `${A} refs/heads/main`, `^${B}`, `${B} refs/tags/v1`, `${A} refs/remotes/origin/main`, `${A} refs/heads/a..b`, `${A.slice(1)} refs/heads/short`, 'junk', ''].join('\n');
    expect(Object.fromEntries(parsePackedRefs(Buffer.from(text), 40))).toEqual({ 'refs/heads/main': A, 'refs/tags/v1': B });
  });

  it('a packed-refs that is a link or a FIFO is no packed-refs; one past its bound fails closed', async () => {
    const dir = gitDir('packed');
    const file = path.join(dir, 'packed-refs');
    symlinkSync(path.join(root, 'secret'), file);
    expect(await readPackedRefs(file, 40, 1024)).toBeNull();
    rmSync(file);
    execFileSync('mkfifo', [file]);
    expect(await readPackedRefs(file, 40, 1024)).toBeNull();
    rmSync(file);
    writeFileSync(file, `${A} refs/heads/main\n`.repeat(100));
    await expect(readPackedRefs(file, 40, 1024)).rejects.toBeInstanceOf(SyncBound);
  });
});
