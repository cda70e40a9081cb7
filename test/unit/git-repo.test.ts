import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { gitFixtures } from './git-fixtures.js';
import { readRepoLayout, withEffectiveHooksPath } from '../../daemon/plan/git/git-repo.js';
import { repoMounts, repoWarnings, type GitRepo, type RepoPolicy } from '../../daemon/plan/git/git.js';
import { SandboxdError } from '../../shared/errors.js';

/**
 * The layout reader on real repositories made by real git: which shapes it recognises, what it
 * refuses (REPOSITORY_UNSAFE), and the mounts each shape gets.
 */
const { root: rootDir, git, repo } = gitFixtures('sbx-layout-');

const readonly: RepoPolicy = { hooks: 'readonly', config: 'readonly' };
const table = (layout: GitRepo, policy = readonly) =>
  repoMounts(layout, policy, '/rt/empty', undefined).map((mount) => `${path.relative(rootDir(), mount.target)}:${mount.readOnly ? 'ro' : 'rw'}${mount.source === '/rt/empty' ? ' (empty)' : ''}`);

async function refusal(cwd: string): Promise<string> {
  try {
    await readRepoLayout(cwd, rootDir());
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'REPOSITORY_UNSAFE') return error.message.replaceAll(`${rootDir()}/`, '');
    throw error;
  }
  throw new Error('not refused');
}

async function layout(cwd: string): Promise<GitRepo> {
  const found = await readRepoLayout(cwd, rootDir());
  if (found === null) throw new Error('no repository');
  return found;
}

describe('the repository layout, read without git', () => {
  it('a plain clone: the git dir is pinned read-write, hooks and config read-only; a subdirectory finds the same', async () => {
    const dir = repo('plain');
    mkdirSync(path.join(dir, 'sub', 'deeper'), { recursive: true });
    const found = await layout(path.join(dir, 'sub', 'deeper'));
    expect({ kind: found.kind, top: found.topLevel, gitDir: found.gitDir }).toEqual({ kind: 'plain', top: dir, gitDir: path.join(dir, '.git') });
    expect(table(found)).toEqual(['plain/.git:rw', 'plain/.git/hooks:ro', 'plain/.git/config:ro']);
    expect(table(found, { hooks: 'writable', config: 'writable' })).toEqual(['plain/.git:rw']);
    // Every directory the walk looked at invalidates a cached answer.
    expect(found.watched).toEqual(expect.arrayContaining([path.join(dir, 'sub', 'deeper'), path.join(dir, 'sub'), dir, path.join(dir, '.git'), path.join(dir, '.git', 'config')]));
  });

  it('a corrupt HEAD changes nothing: the layout is on disk, not in what git says', async () => {
    const dir = repo('corrupt');
    writeFileSync(path.join(dir, '.git', 'HEAD'), 'garbage\n');
    expect((await layout(dir)).kind).toBe('plain');
  });

  it('an include that is a FIFO is never opened: the layout is read at once, and the guard is told to look at it', async () => {
    const dir = repo('fifo');
    execFileSync('mkfifo', [path.join(dir, 'inc.fifo')]);
    git(dir, 'config', 'include.path', '../inc.fifo');
    const found = await layout(dir);
    expect({ includes: found.includes, pending: found.pendingIncludes }).toEqual({ includes: [], pending: [path.join(dir, 'inc.fifo')] });
    expect(table(found)).toEqual(['fifo/.git:rw', 'fifo/.git/hooks:ro', 'fifo/.git/config:ro']);
  });

  it('no repository: null, whatever is above', async () => {
    const dir = path.join(rootDir(), 'none');
    mkdirSync(dir);
    expect(await readRepoLayout(dir, rootDir())).toBeNull();
  });

  it('worktrees and nested submodules: every git dir pinned, what git runs or follows read-only, other worktrees kept registered', async () => {
    const deep = repo('deep');
    const lib = repo('lib');
    git(lib, 'submodule', 'add', '-q', deep, 'deep');
    git(lib, 'commit', '-q', '-m', 'deep');
    const main = repo('main');
    git(main, 'submodule', 'add', '-q', lib, 'lib');
    git(main, 'commit', '-q', '-m', 'lib');
    git(main, 'submodule', 'update', '-q', '--init', '--recursive');
    git(main, 'worktree', 'add', '-q', '-b', 'wt', path.join(rootDir(), 'wt'));
    git(main, 'worktree', 'add', '-q', '-b', 'gone', path.join(rootDir(), 'gone'));
    rmSync(path.join(rootDir(), 'gone', '.git'));
    const found = await layout(main);
    expect(found.submodules.map((submodule) => [path.relative(rootDir(), submodule.dir), submodule.workTree === null ? null : path.relative(rootDir(), submodule.workTree)])).toEqual([
      ['main/.git/modules/lib', 'main/lib'],
      ['main/.git/modules/lib/modules/deep', 'main/lib/deep'],
    ]);
    expect(table(found)).toEqual([
      'main/.git:rw',
      'main/.git/worktrees:rw',
      'main/.git/modules:rw',
      'main/.git/modules/lib:rw',
      'main/.git/modules/lib/modules:rw',
      'main/.git/modules/lib/modules/deep:rw',
      'main/.git/worktrees/gone:rw',
      'main/.git/worktrees/wt:rw',
      'main/.git/worktrees/gone/gitdir:ro',
      'main/.git/worktrees/gone/commondir:ro',
      'main/.git/worktrees/wt/gitdir:ro',
      'main/.git/worktrees/wt/commondir:ro',
      'wt/.git:ro',
      'main/lib/.git:ro',
      'main/lib/deep/.git:ro',
      'main/.git/hooks:ro',
      'main/.git/modules/lib/hooks:ro',
      'main/.git/modules/lib/modules/deep/hooks:ro',
      'main/.git/config:ro',
      'main/.git/modules/lib/config:ro',
      'main/.git/modules/lib/modules/deep/config:ro',
    ]);
    const worktree = await layout(path.join(rootDir(), 'wt'));
    expect({ kind: worktree.kind, gitDir: path.relative(rootDir(), worktree.gitDir), common: path.relative(rootDir(), worktree.commonDir) }).toEqual({ kind: 'worktree', gitDir: 'main/.git/worktrees/wt', common: 'main/.git' });
    expect(table(worktree)).toContain('wt/.git:ro');
    const submodule = await layout(path.join(rootDir(), 'main', 'lib', 'deep'));
    expect({ kind: submodule.kind, top: path.relative(rootDir(), submodule.topLevel), common: path.relative(rootDir(), submodule.commonDir) }).toEqual({
      kind: 'submodule',
      top: 'main/lib/deep',
      common: 'main/.git/modules/lib/modules/deep',
    });
    expect(table(submodule)).toEqual(['main/.git/modules/lib/modules/deep:rw', 'main/lib/deep/.git:ro', 'main/.git/modules/lib/modules/deep/hooks:ro', 'main/.git/modules/lib/modules/deep/config:ro']);
  });

  it('admin files are taken only when they exist and name their work tree back (a gitdir naming a key is never mounted)', async () => {
    const dir = repo('admins');
    const key = path.join(rootDir(), 'id_ed25519');
    writeFileSync(key, 'SECRET\n');
    for (const name of ['no-gitdir', 'key']) {
      mkdirSync(path.join(dir, '.git', 'worktrees', name), { recursive: true });
      writeFileSync(path.join(dir, '.git', 'worktrees', name, 'commondir'), '../..\n');
    }
    writeFileSync(path.join(dir, '.git', 'worktrees', 'key', 'gitdir'), `${key}\n`);
    const mounts = table(await layout(dir));
    expect(mounts.filter((mount) => mount.includes('id_ed25519'))).toEqual([]);
    expect(mounts.filter((mount) => mount.includes('no-gitdir/gitdir'))).toEqual([]);
  });

  it('refuses what git itself never makes and anything a read-only mount could not hold', async () => {
    const dir = repo('refused');
    writeFileSync(path.join(dir, '.git', 'commondir'), '/elsewhere\n');
    expect(await refusal(dir)).toBe('refused/.git/commondir redirects the repository to another git dir (git never writes one there)');
    rmSync(path.join(dir, '.git', 'commondir'));

    mkdirSync(path.join(dir, '.git', 'worktrees', 'x'), { recursive: true });
    writeFileSync(path.join(dir, '.git', 'worktrees', 'x', 'commondir'), '/elsewhere\n');
    expect(await refusal(dir)).toBe("refused/.git/worktrees/x/commondir points at /elsewhere, not at its own repository (git writes ../..)");
    rmSync(path.join(dir, '.git', 'worktrees'), { recursive: true });

    mkdirSync(path.join(dir, '.git', 'modules'));
    symlinkSync(rootDir(), path.join(dir, '.git', 'modules', 'lib'));
    expect(await refusal(dir)).toBe('refused/.git/modules/lib is a symbolic link');
    rmSync(path.join(dir, '.git', 'modules'), { recursive: true });

    expect(await refusal(path.join(dir, '.git'))).toContain('refused/.git is itself a git directory');

    const linked = path.join(rootDir(), 'linked');
    mkdirSync(linked);
    symlinkSync(path.join(dir, '.git'), path.join(linked, '.git'));
    expect(await refusal(linked)).toBe('linked/.git is a symbolic link');

    const separate = path.join(rootDir(), 'separate');
    mkdirSync(separate);
    git(separate, 'init', '-q', '--separate-git-dir', path.join(rootDir(), 'separate.git'));
    expect(await refusal(separate)).toContain('separate/.git names');

    rmSync(path.join(dir, '.git', 'hooks'), { recursive: true });
    symlinkSync(path.join(rootDir(), 'plain'), path.join(dir, '.git', 'hooks'));
    const withLinkedHooks = await layout(dir);
    expect(() => repoMounts(withLinkedHooks, readonly, '/rt/empty', undefined)).toThrow(/hooks is a symbolic link.*cannot keep the repository's hooks read-only/);
    expect(table(withLinkedHooks, { hooks: 'writable', config: 'readonly' })).toEqual(['refused/.git:rw', 'refused/.git/config:ro']);
  });

  it("a worktree whose admin dir does not name it back is not this repository's", async () => {
    const main = repo('backref');
    git(main, 'worktree', 'add', '-q', '-b', 'x', path.join(rootDir(), 'backref-wt'));
    writeFileSync(path.join(main, '.git', 'worktrees', 'backref-wt', 'gitdir'), `${path.join(rootDir(), 'elsewhere', '.git')}\n`);
    expect(await refusal(path.join(rootDir(), 'backref-wt'))).toContain('backref/.git/worktrees/backref-wt/gitdir does not name');
  });

  it('core.hooksPath and includes inside the repository: mounted read-only when they exist, watched when they do not', async () => {
    const dir = repo('paths');
    mkdirSync(path.join(dir, '.githooks'));
    writeFileSync(path.join(dir, 'team.gitconfig'), '[core]\n');
    git(dir, 'config', 'core.hooksPath', '.githooks');
    git(dir, 'config', 'include.path', '../team.gitconfig');
    git(dir, 'config', 'includeIf.gitdir:/nowhere/.path', '../later.gitconfig');
    const found = await layout(dir);
    expect({ hooksPaths: found.hooksPaths, includes: found.includes, pending: found.pendingIncludes }).toEqual({
      hooksPaths: [{ path: path.join(dir, '.githooks'), exists: true }],
      includes: [path.join(dir, 'team.gitconfig')],
      pending: [path.join(dir, 'later.gitconfig')],
    });
    expect(table(found)).toEqual(expect.arrayContaining(['paths/.githooks:ro', 'paths/team.gitconfig:ro']));
    expect(repoWarnings(found, readonly)[0]).toContain('core.hooksPath');
    // An include the sandbox could repoint cannot be held read-only.
    rmSync(path.join(dir, 'team.gitconfig'));
    symlinkSync(path.join(rootDir(), 'plain', 'f'), path.join(dir, 'team.gitconfig'));
    const linked = await layout(dir);
    expect(() => repoMounts(linked, readonly, '/rt/empty', undefined)).toThrow(/team.gitconfig is a symbolic link on the way to the config include/);
    expect(() => repoMounts(linked, { hooks: 'readonly', config: 'writable' }, '/rt/empty', undefined)).not.toThrow();
  });

  it('the effective core.hooksPath git reports (a global relative one) adds protection; one outside the repository adds nothing', async () => {
    const dir = repo('global-hooks');
    mkdirSync(path.join(dir, '.hooks'));
    const found = await layout(dir);
    expect((await withEffectiveHooksPath(found, '.hooks', rootDir())).hooksPaths).toEqual([{ path: path.join(dir, '.hooks'), exists: true }]);
    expect(table(await withEffectiveHooksPath(found, '.hooks', rootDir()))).toContain('global-hooks/.hooks:ro');
    expect(await withEffectiveHooksPath(found, '~/hooks', rootDir())).toBe(found);
    expect(await withEffectiveHooksPath(found, null, rootDir())).toBe(found);
  });
});
