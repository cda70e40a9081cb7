import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStage, stageObjects } from '../../daemon/gitsync/object-stage.js';

/** The sandbox's object files reach the daemon's staging repository as the very files they are, or not at all. */
let root = '';
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), 'sbx-stage-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

const hex = (char: string, length: number) => char.repeat(length);

describe('stageObjects', () => {
  it('links finished loose objects and complete packs; never a link, a FIFO, a temp file or a pack without its index', async () => {
    const objects = path.join(root, 'sandbox', 'objects');
    const stage = path.join(root, 'stage.git');
    await ensureStage(stage, '/host/.git/objects', 40);
    mkdirSync(path.join(objects, 'ab'), { recursive: true });
    mkdirSync(path.join(objects, 'cd'));
    mkdirSync(path.join(objects, 'pack'));
    writeFileSync(path.join(objects, 'ab', hex('1', 38)), 'loose');
    writeFileSync(path.join(root, 'secret'), 'host secret');
    symlinkSync(path.join(root, 'secret'), path.join(objects, 'ab', hex('2', 38)));
    execFileSync('mkfifo', [path.join(objects, 'cd', hex('3', 38))]);
    writeFileSync(path.join(objects, 'cd', 'tmp_obj_x'), 'half');
    writeFileSync(path.join(objects, 'pack', `pack-${hex('4', 40)}.pack`), 'pack');
    writeFileSync(path.join(objects, 'pack', `pack-${hex('4', 40)}.idx`), 'idx');
    writeFileSync(path.join(objects, 'pack', `pack-${hex('5', 40)}.pack`), 'being written');
    symlinkSync(path.join(root, 'secret'), path.join(objects, 'pack', `pack-${hex('6', 40)}.pack`));
    writeFileSync(path.join(objects, 'pack', `pack-${hex('6', 40)}.idx`), 'idx');
    await stageObjects(objects, stage, 40);
    const staged = (file: string) => existsSync(path.join(stage, 'objects', file));
    expect({
      loose: staged(`ab/${hex('1', 38)}`),
      link: staged(`ab/${hex('2', 38)}`),
      fifo: staged(`cd/${hex('3', 38)}`),
      temp: staged('cd/tmp_obj_x'),
      pack: staged(`pack/pack-${hex('4', 40)}.pack`) && staged(`pack/pack-${hex('4', 40)}.idx`),
      unfinished: staged(`pack/pack-${hex('5', 40)}.pack`),
      linkedPack: staged(`pack/pack-${hex('6', 40)}.pack`) || staged(`pack/pack-${hex('6', 40)}.idx`),
    }).toEqual({ loose: true, link: false, fifo: false, temp: false, pack: true, unfinished: false, linkedPack: false });
    // The very inode looked at (a hard link), a regular file.
    expect(lstatSync(path.join(stage, 'objects', 'ab', hex('1', 38))).ino).toBe(lstatSync(path.join(objects, 'ab', hex('1', 38))).ino);
  });
});
