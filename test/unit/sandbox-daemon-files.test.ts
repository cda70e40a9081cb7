import { promises as fsPromises, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { createLogger } from '../../daemon/os/logger.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';

/**
 * The daemon's read-only files (configs, worktree pointers) are written from the host's: a host
 * file whose read failed or that is past its bound fails the copy, never makes a sandbox without
 * it (an absent one is none; a link is refused before, by the layout's read).
 */
const { root, git, repo } = gitFixtures('sbx-daemon-files-');

async function refresh(dir: string) {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }));
  return store.refresh(layout.outer.commonDir, layout.outer.facts);
}

/** The file system's own open, which the spy calls through for every other file. */
const originalOpen = fsPromises.open;

describe("the daemon's files from the host's", () => {
  it.each(['gitdir', 'config.worktree'])("a worktree's %s whose read fails (EIO) fails the copy with the file named", async (name) => {
    const dir = repo(`unreadable-${name}`);
    git(dir, 'worktree', 'add', '-q', '-b', 'one', `${dir}-one`);
    const admin = path.join(dir, '.git', 'worktrees', `unreadable-${name}-one`);
    writeFileSync(path.join(admin, 'config.worktree'), '[core]\n\tabbrev = 12\n');
    const file = path.join(admin, name);
    const spy = vi.spyOn(fsPromises, 'open').mockImplementation(((...args: Parameters<typeof fsPromises.open>) =>
      args[0] === file && typeof args[1] !== 'string' ? Promise.reject(Object.assign(new Error(`EIO: i/o error, open '${file}'`), { code: 'EIO' })) : originalOpen(...args)));
    try {
      await expect(refresh(dir)).rejects.toMatchObject({ code: 'REPOSITORY_UNSAFE', message: `${file} cannot be read safely (EIO: i/o error, open '${file}')` });
    } finally {
      spy.mockRestore();
    }
  });

  it("a worktree's config.worktree past the config bound fails the copy", async () => {
    const dir = repo('bounds');
    git(dir, 'worktree', 'add', '-q', '-b', 'one', `${dir}-one`);
    const file = path.join(dir, '.git', 'worktrees', 'bounds-one', 'config.worktree');
    writeFileSync(file, `[core]\n${'\t# a comment no one wrote\n'.repeat(50_000)}`);
    await expect(refresh(dir)).rejects.toMatchObject({ code: 'REPOSITORY_UNSAFE', message: `${file} cannot be read safely (${file} is larger than 1048576 bytes)` });
  });
});
