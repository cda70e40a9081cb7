import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { protectGitPaths, type GitPath } from '../../daemon/plan/git/git-paths.js';

/**
 * Paths the host's git reads that a writable mount reaches: held read-only with every directory
 * on the way pinned, or the session refused (GIT_PATH_UNPROTECTED) when that cannot be done.
 */
let root = '';
beforeAll(() => {
  root = realpathSync(mkdtempSync(path.join(tmpdir(), 'sbx-paths-')));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function protect(paths: GitPath[], writable: { source: string; target: string }[], allowUnprotected = false) {
  return protectGitPaths({ paths, writable, allowUnprotected, relabel: undefined, memoKey: {} });
}

const table = (mounts: { source: string; target: string; readOnly: boolean }[]) => mounts.map((mount) => `${path.relative(root, mount.target)}:${mount.readOnly ? 'ro' : 'rw'}${mount.source === mount.target ? '' : ` <- ${path.relative(root, mount.source)}`}`);

describe('protectGitPaths', () => {
  it('a file the config names inside the work tree: read-only, every directory on the way a mount point of its own; outside, nothing', async () => {
    const tree = path.join(root, 'dotfiles');
    mkdirSync(path.join(tree, 'git', 'inc'), { recursive: true });
    writeFileSync(path.join(tree, 'git', 'inc', 'work.gitconfig'), '[user]\n');
    mkdirSync(path.join(tree, 'templates'));
    const { mounts, warnings } = await protect(
      [
        { path: path.join(tree, 'git', 'inc', 'work.gitconfig'), what: 'include.path in ~/.gitconfig', kind: 'file' },
        { path: path.join(tree, 'templates'), what: 'init.templatedir in ~/.gitconfig', kind: 'dir' },
        { path: path.join(root, 'elsewhere'), what: 'core.excludesfile in ~/.gitconfig', kind: 'file' },
      ],
      [{ source: tree, target: tree }],
    );
    expect(table(mounts)).toEqual(['dotfiles/git:rw', 'dotfiles/git/inc:rw', 'dotfiles/git/inc/work.gitconfig:ro', 'dotfiles/templates:ro']);
    expect(warnings).toEqual([]);
  });

  it('one that does not exist yet refuses the session, naming the key, the file and the option; with the option it is a warning', async () => {
    const tree = path.join(root, 'missing');
    mkdirSync(tree);
    const later = { path: path.join(tree, 'later.gitconfig'), what: 'include.path in ~/.gitconfig', kind: 'file' } as const;
    await expect(protect([later], [{ source: tree, target: tree }])).rejects.toMatchObject({
      code: 'GIT_PATH_UNPROTECTED',
      message: `${later.path} (include.path in ~/.gitconfig) does not exist yet inside the writable mount ${tree}: the sandbox could make what your host's git reads there`,
      remedy: expect.stringContaining('--allow-unprotected-git-paths') as string,
    });
    const allowed = await protect([later], [{ source: tree, target: tree }], true);
    expect(allowed.mounts).toEqual([]);
    expect(allowed.warnings[0]).toContain('(allowed by --allow-unprotected-git-paths');
  });

  it('one reached through a symbolic link inside a writable mount is refused: the sandbox could repoint the link', async () => {
    const tree = path.join(root, 'linked');
    mkdirSync(path.join(tree, 'real'), { recursive: true });
    writeFileSync(path.join(tree, 'real', 'x.gitconfig'), '');
    symlinkSync('real', path.join(tree, 'inc'));
    await expect(protect([{ path: path.join(tree, 'inc', 'x.gitconfig'), what: 'include.path in ~/.gitconfig', kind: 'file' }], [{ source: tree, target: tree }])).rejects.toMatchObject({
      code: 'GIT_PATH_UNPROTECTED',
      message: expect.stringContaining(`is reached through the symbolic link ${path.join(tree, 'inc')}`) as string,
    });
    // A link outside every writable mount is the user's: the file it leads to is protected where it is.
    const home = path.join(root, 'home');
    mkdirSync(home);
    symlinkSync(path.join(tree, 'real', 'x.gitconfig'), path.join(home, '.gitconfig'));
    const { mounts } = await protect([{ path: path.join(home, '.gitconfig'), what: 'your global git config file', kind: 'file' }], [{ source: tree, target: tree }]);
    expect(table(mounts)).toEqual(['linked/real:rw', 'linked/real/x.gitconfig:ro']);
  });

  it('a writable mount at another path: the protection follows it there; the repository there is refused', async () => {
    const tree = path.join(root, 'remapped');
    mkdirSync(path.join(tree, 'repo', '.git'), { recursive: true });
    writeFileSync(path.join(tree, 'team.gitconfig'), '');
    const { mounts } = await protect([{ path: path.join(tree, 'team.gitconfig'), what: 'include.path', kind: 'file' }], [{ source: tree, target: '/work' }]);
    expect(mounts.map((mount) => [mount.source, mount.target, mount.readOnly])).toEqual([[path.join(tree, 'team.gitconfig'), '/work/team.gitconfig', true]]);
    await expect(protect([{ path: path.join(tree, 'repo'), what: "the repository's work tree", kind: 'worktree' }], [{ source: tree, target: '/work' }])).rejects.toMatchObject({ code: 'INVALID_MOUNT' });
  });

  it('the work tree inside a wider writable mount becomes a mount point, and so does every directory above it there', async () => {
    const wide = path.join(root, 'projects');
    mkdirSync(path.join(wide, 'group', 'repo', '.git'), { recursive: true });
    const repo = path.join(wide, 'group', 'repo');
    const { mounts } = await protect(
      [
        { path: repo, what: "the repository's work tree", kind: 'worktree' },
        { path: path.join(repo, '.git'), what: "the repository's git dir", kind: 'gitdir' },
      ],
      [{ source: repo, target: repo }, { source: wide, target: wide }],
    );
    expect(table(mounts)).toEqual(['projects/group:rw', 'projects/group/repo:rw']);
  });
});
