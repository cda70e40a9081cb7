import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { IndexUnreadable, indexGitlinks } from '../../daemon/guard/index-file.js';

const root = mkdtempSync(path.join(tmpdir(), 'sbx-index-'));
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'utf8', env: { PATH: process.env.PATH ?? '', HOME: root, GIT_CONFIG_NOSYSTEM: '1' } }).trim();
}

/** A repository whose index holds files, gitlinks (one with a very long path) and an intent-to-add entry. */
function repository(name: string, objectFormat: 'sha1' | 'sha256'): { dir: string; zero: string } {
  const dir = path.join(root, name);
  mkdirSync(dir);
  git(dir, 'init', '-q', `--object-format=${objectFormat}`);
  for (const sub of ['a', 'b/c']) {
    mkdirSync(path.join(dir, sub), { recursive: true });
    writeFileSync(path.join(dir, sub, 'f'), sub);
  }
  git(dir, 'add', '.');
  const zero = objectFormat === 'sha1' ? '1'.repeat(40) : '1'.repeat(64);
  git(dir, 'update-index', '--add', '--cacheinfo', `160000,${zero},b/sub`);
  git(dir, 'update-index', '--add', '--cacheinfo', `160000,${zero},${'x'.repeat(5000)}`);
  writeFileSync(path.join(dir, 'new'), 'n');
  git(dir, 'add', '-N', 'new');
  return { dir, zero };
}

describe('gitlinks read from the index without git', () => {
  const expected = ['b/sub', 'x'.repeat(5000)];

  it('index versions 2, 3 (extended flags) and 4 (path prefix compression)', () => {
    const { dir } = repository('versions', 'sha1');
    for (const version of ['2', '3', '4']) {
      git(dir, 'update-index', '--index-version', version);
      expect(indexGitlinks(readFileSync(path.join(dir, '.git', 'index')), 20).paths).toEqual(expected);
    }
  });

  it('a split index names its shared index, whose gitlinks count too', () => {
    const { dir, zero } = repository('split', 'sha1');
    git(dir, 'update-index', '--split-index');
    git(dir, 'update-index', '--add', '--cacheinfo', `160000,${zero},late`);
    const split = indexGitlinks(readFileSync(path.join(dir, '.git', 'index')), 20);
    const shared = readdirSync(path.join(dir, '.git')).find((name) => name.startsWith('sharedindex.')) ?? '';
    expect(split).toEqual({ paths: ['late'], sharedIndex: shared.slice('sharedindex.'.length) });
    expect(indexGitlinks(readFileSync(path.join(dir, '.git', shared)), 20).paths).toEqual(expected);
  });

  it('SHA-256 repositories', () => {
    const { dir } = repository('sha256', 'sha256');
    expect(indexGitlinks(readFileSync(path.join(dir, '.git', 'index')), 32).paths).toEqual(expected);
  });

  it('refuses what is not an index, and one cut short', () => {
    expect(() => indexGitlinks(Buffer.from('not an index at all, not at all'), 20)).toThrow(IndexUnreadable);
    const { dir } = repository('short', 'sha1');
    const index = readFileSync(path.join(dir, '.git', 'index'));
    expect(() => indexGitlinks(index.subarray(0, 80), 20)).toThrow(IndexUnreadable);
  });
});
