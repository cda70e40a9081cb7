import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';

export interface GitFixtures {
  /** The canonical temp dir the repositories live in (removed after the file's tests). */
  root: () => string;
  /** Real git, isolated from the machine's config; throws when git fails. */
  git: (cwd: string, ...args: string[]) => string;
  /** A repository `name` under root with one commit. */
  repo: (name: string) => string;
}

/** Repositories made by real git for the layout and guard tests. */
export function gitFixtures(prefix: string): GitFixtures {
  let root = '';
  beforeAll(() => {
    root = realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));
  });
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
  });
  const git = (cwd: string, ...args: string[]): string =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'protocol.file.allow=always', ...args], {
      cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      env: { PATH: process.env.PATH ?? '', HOME: root, GIT_CONFIG_NOSYSTEM: '1' },
    }).trim();
  return {
    root: () => root,
    git,
    repo: (name) => {
      const dir = path.join(root, name);
      mkdirSync(dir, { recursive: true });
      git(dir, 'init', '-q', '-b', 'main');
      writeFileSync(path.join(dir, 'f'), name);
      git(dir, 'add', '.');
      git(dir, 'commit', '-q', '-m', 'init');
      return dir;
    },
  };
}
