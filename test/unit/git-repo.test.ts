import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { gitFixtures } from './git-fixtures.js';
import { readRepoLayout, withEffectiveHooksPath } from '../../daemon/plan/git/git-repo.js';
import { repoMounts, repoNotes, type GitRepo, type RepoPolicy } from '../../daemon/plan/git/git.js';
import { HostGit } from '../../daemon/gitsync/host-git.js';
import { workTreePins } from '../../daemon/gitsync/pins.js';
import { SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { createLogger } from '../../daemon/os/logger.js';
import { runSubprocess } from '../../daemon/os/subprocess.js';
import { SandboxdError } from '../../shared/errors.js';

/**
 * The layout reader on real repositories made by real git: which shapes it recognises, what it
 * refuses (REPOSITORY_UNSAFE), and the mounts each shape gets with its sandbox git dir (made by the
 * real store, its work tree's pins asked of real git).
 */
const { root: rootDir, git, repo } = gitFixtures('sbx-layout-');

const readonly: RepoPolicy = { hooks: 'readonly', config: 'readonly' };

async function sandboxOf(layout: GitRepo) {
  const store = new SandboxStore(path.join(rootDir(), 'state'), createLogger({ kind: 'silent' }));
  const state = await store.refresh(layout.outer.commonDir, layout.outer.facts);
  const hostGit = new HostGit({ run: runSubprocess, git: 'git', emptyDir: '/nonexistent', path: process.env.PATH ?? '' });
  return { source: state.root, target: layout.outer.commonDir, ...(await store.mountFiles(state)), pins: await workTreePins(layout, hostGit) };
}

/** Each mount as `<target>:<ro|rw>`, targets under the fixtures' root relative, the sandbox's own sources named. */
async function table(layout: GitRepo, policy = readonly): Promise<string[]> {
  const sandbox = await sandboxOf(layout);
  if (process.env.PRINT_TABLES !== undefined) console.log(JSON.stringify(repoMounts(layout, sandbox, policy, '/rt/empty', undefined).map((mount) => mount.target)));
  return repoMounts(layout, sandbox, policy, '/rt/empty', undefined).map((mount) => {
    const target = mount.target.startsWith('/run/') ? mount.target.replace(/[0-9a-f]{16}$/, '<store>') : path.relative(rootDir(), mount.target);
    const source = mount.source === '/rt/empty' ? ' (empty)' : mount.source === sandbox.source ? ' (sandbox)' : mount.source.startsWith(path.join(rootDir(), 'state')) ? ' (daemon)' : '';
    return `${target}:${mount.readOnly ? 'ro' : 'rw'}${source}`;
  });
}

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
  it("a plain clone: the sandbox's own git dir where the host's is, its config and hooks read-only, the host's objects read-only; a subdirectory finds the same", async () => {
    const dir = repo('plain');
    mkdirSync(path.join(dir, 'sub', 'deeper'), { recursive: true });
    const found = await layout(path.join(dir, 'sub', 'deeper'));
    expect({ kind: found.kind, top: found.topLevel, gitDir: found.gitDir }).toEqual({ kind: 'plain', top: dir, gitDir: path.join(dir, '.git') });
    expect(await table(found)).toEqual(['plain/.git:rw (sandbox)', 'plain/.git/config:ro (daemon)', 'plain/.git/objects/info/alternates:ro (daemon)', 'plain/.git/hooks:ro (empty)', '/run/sandboxd/git/objects/<store>:ro']);
    expect(await table(found, { hooks: 'writable', config: 'writable' })).toEqual(['plain/.git:rw (sandbox)', 'plain/.git/objects/info/alternates:ro (daemon)', '/run/sandboxd/git/objects/<store>:ro']);
    // Every directory the walk looked at invalidates a cached answer.
    expect(found.watched).toEqual(expect.arrayContaining([path.join(dir, 'sub', 'deeper'), path.join(dir, 'sub'), dir, path.join(dir, '.git'), path.join(dir, '.git', 'config')]));
  });

  it('a corrupt HEAD changes nothing: the layout is on disk, not in what git says', async () => {
    const dir = repo('corrupt');
    writeFileSync(path.join(dir, '.git', 'HEAD'), 'garbage\n');
    expect((await layout(dir)).kind).toBe('plain');
  });

  it('an include that is a FIFO is never opened: the repository is refused at once (any git reading it would block)', async () => {
    const dir = repo('fifo');
    execFileSync('mkfifo', [path.join(dir, 'inc.fifo')]);
    git(dir, 'config', 'include.path', '../inc.fifo');
    expect(await refusal(dir)).toContain('fifo/inc.fifo is included by the repository config but is not a regular file');
  });

  it('no repository: null, whatever is above', async () => {
    const dir = path.join(rootDir(), 'none');
    mkdirSync(dir);
    expect(await readRepoLayout(dir, rootDir())).toBeNull();
  });

  it("worktrees and nested submodules: one sandbox git dir for all, the repository's config and each git dir's hooks, alternates and pointers read-only (a submodule's config is the sandbox's: the host never reads it), the submodules' paths pinned", async () => {
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
    expect(await table(found)).toEqual([
      'main/.git:rw (sandbox)',
      'main/.git/config:ro (daemon)',
      'main/.git/objects/info/alternates:ro (daemon)',
      'main/.git/worktrees/gone/gitdir:ro (daemon)',
      'main/.git/worktrees/gone/commondir:ro (daemon)',
      'main/.git/worktrees/wt/gitdir:ro (daemon)',
      'main/.git/worktrees/wt/commondir:ro (daemon)',
      'main/.git/modules/lib/objects/info/alternates:ro (daemon)',
      'main/.git/modules/lib/modules/deep/objects/info/alternates:ro (daemon)',
      'main/.git/hooks:ro (empty)',
      'main/.git/modules/lib/hooks:ro (empty)',
      'main/.git/modules/lib/modules/deep/hooks:ro (empty)',
      '/run/sandboxd/git/objects/<store>:ro',
      '/run/sandboxd/git/objects/<store>:ro',
      '/run/sandboxd/git/objects/<store>:ro',
      // The submodules' paths are mount points of their own; their `.git` files read-only.
      'main/lib:rw',
      'main/lib/deep:rw',
      'main/lib/.git:ro',
      'main/lib/deep/.git:ro',
    ]);
    const worktree = await layout(path.join(rootDir(), 'wt'));
    expect({ kind: worktree.kind, gitDir: path.relative(rootDir(), worktree.gitDir), common: path.relative(rootDir(), worktree.commonDir) }).toEqual({ kind: 'worktree', gitDir: 'main/.git/worktrees/wt', common: 'main/.git' });
    expect(await table(worktree)).toEqual(expect.arrayContaining(['main/.git:rw (sandbox)', 'wt/.git:ro']));
    const submodule = await layout(path.join(rootDir(), 'main', 'lib', 'deep'));
    expect({ kind: submodule.kind, top: path.relative(rootDir(), submodule.topLevel), common: path.relative(rootDir(), submodule.commonDir) }).toEqual({
      kind: 'submodule',
      top: 'main/lib/deep',
      common: 'main/.git/modules/lib/modules/deep',
    });
    // A submodule's session: the outermost repository's sandbox git dir, seen where the host's is.
    expect(path.relative(rootDir(), submodule.outer.commonDir)).toBe('main/.git');
    expect(await table(submodule)).toEqual(expect.arrayContaining(['main/.git:rw (sandbox)', 'main/lib/deep/.git:ro', 'main/.git/modules/lib/modules/deep/hooks:ro (empty)']));
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
    const found = await layout(dir);
    const mounts = repoMounts(found, await sandboxOf(found), readonly, '/rt/empty', undefined);
    expect(mounts.filter((mount) => mount.source.includes('id_ed25519') || mount.target.includes('id_ed25519'))).toEqual([]);
    expect(mounts.filter((mount) => mount.target.includes('no-gitdir/gitdir'))).toEqual([]);
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

    // The host's own hooks/ (even a symbolic link) is never what the sandbox sees: it has its own.
    rmSync(path.join(dir, '.git', 'hooks'), { recursive: true });
    symlinkSync(path.join(rootDir(), 'plain'), path.join(dir, '.git', 'hooks'));
    expect(await table(await layout(dir))).toContain('refused/.git/hooks:ro (empty)');
  });

  it("a worktree whose admin dir does not name it back is not this repository's", async () => {
    const main = repo('backref');
    git(main, 'worktree', 'add', '-q', '-b', 'x', path.join(rootDir(), 'backref-wt'));
    writeFileSync(path.join(main, '.git', 'worktrees', 'backref-wt', 'gitdir'), `${path.join(rootDir(), 'elsewhere', '.git')}\n`);
    expect(await refusal(path.join(rootDir(), 'backref-wt'))).toContain('backref/.git/worktrees/backref-wt/gitdir does not name');
  });

  it('core.hooksPath and includes inside the work tree are found, present or not (git-paths.ts protects them); one behind a symbolic link there is refused', async () => {
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
    expect(repoNotes(found, readonly).warnings[0]).toContain('core.hooksPath');
    // An include the sandbox could repoint cannot be held read-only, whatever the sandbox may do with its own copies.
    rmSync(path.join(dir, 'team.gitconfig'));
    symlinkSync(path.join(rootDir(), 'plain', 'f'), path.join(dir, 'team.gitconfig'));
    const linked = await layout(dir);
    const sandbox = await sandboxOf(linked);
    for (const policy of [readonly, { hooks: 'writable', config: 'writable' } as const]) {
      expect(() => repoMounts(linked, sandbox, policy, '/rt/empty', undefined)).toThrow(/team.gitconfig is a symbolic link on the way to the config include.*the sandbox could change what the host's git reads there/);
    }
  });

  it('the effective core.hooksPath git reports (a global relative one) adds protection; one outside the repository adds nothing', async () => {
    const dir = repo('global-hooks');
    mkdirSync(path.join(dir, '.hooks'));
    const found = await layout(dir);
    expect((await withEffectiveHooksPath(found, '.hooks', rootDir())).hooksPaths).toEqual([{ path: path.join(dir, '.hooks'), exists: true }]);
    expect(await withEffectiveHooksPath(found, '~/hooks', rootDir())).toBe(found);
    expect(await withEffectiveHooksPath(found, null, rootDir())).toBe(found);
  });
});
