import { lstatSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { containerObjectsPath } from '../../daemon/gitsync/git-dir-pairs.js';
import { SANDBOX_CONFIG_LINES, SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { createLogger } from '../../daemon/os/logger.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';

/**
 * The sandbox's git dir as the store makes it from a real repository: copies the container can
 * change (any uid), the daemon's read-only files, what the sandbox started from, and when the host
 * moved.
 */
const { root, git, repo } = gitFixtures('sbx-store-');

async function refreshed(dir: string) {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }));
  return { store, layout, state: await store.refresh(layout.outer.commonDir, layout.outer.facts) };
}

const mode = (file: string) => (lstatSync(file).mode & 0o777).toString(8);

describe('SandboxStore.refresh', () => {
  it("copies the host's state (never its links), opens it to any container uid, and keeps what the sandbox starts from", async () => {
    const dir = repo('copied');
    git(dir, 'branch', 'side');
    git(dir, 'tag', 'v1');
    git(dir, 'pack-refs', '--all');
    git(dir, 'branch', 'loose');
    symlinkSync(path.join(root(), 'elsewhere'), path.join(dir, '.git', 'refs', 'heads', 'linked'));
    const { state } = await refreshed(dir);
    const sandbox = state.root;
    const main = git(dir, 'rev-parse', 'main');
    expect(readFileSync(path.join(sandbox, 'HEAD'), 'utf8')).toBe('ref: refs/heads/main\n');
    expect(readFileSync(path.join(sandbox, 'packed-refs'), 'utf8')).toBe(readFileSync(path.join(dir, '.git', 'packed-refs'), 'utf8'));
    expect(readFileSync(path.join(sandbox, 'refs', 'heads', 'loose'), 'utf8').trim()).toBe(main);
    expect(() => lstatSync(path.join(sandbox, 'refs', 'heads', 'linked'))).toThrow();
    // Copies, not links to the host's inodes.
    expect(statSync(path.join(sandbox, 'index')).ino).not.toBe(statSync(path.join(dir, '.git', 'index')).ino);
    expect({ dir: mode(sandbox), objects: mode(path.join(sandbox, 'objects')), refs: mode(path.join(sandbox, 'refs', 'heads')), index: mode(path.join(sandbox, 'index')) }).toEqual({ dir: '777', objects: '777', refs: '777', index: '666' });
    expect(readFileSync(path.join(sandbox, 'config'), 'utf8').endsWith(SANDBOX_CONFIG_LINES)).toBe(true);
    expect(readFileSync(path.join(sandbox, 'objects', 'info', 'alternates'), 'utf8')).toBe(`${containerObjectsPath(path.join(dir, '.git', 'objects'))}\n`);
    const [pair] = state.pairs;
    expect(pair?.base.loose.get('refs/heads/loose')?.oid).toBe(main);
    expect(pair?.base.packed).not.toBeNull();
  });

  it("tells when the host's refs moved: an unchanged repository needs no copy", async () => {
    const dir = repo('moved');
    const { store, state } = await refreshed(dir);
    expect(await store.hostPrint(state)).toBe(state.hostPrint);
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'on the host');
    expect(await store.hostPrint(state)).not.toBe(state.hostPrint);
  });

  it('refuses a repository that keeps its refs in a reftable (REPOSITORY_UNSUPPORTED), naming the remedy', async () => {
    const dir = repo('reftable');
    writeFileSync(path.join(dir, '.git', 'config'), `${readFileSync(path.join(dir, '.git', 'config'), 'utf8')}[extensions]\n\trefStorage = reftable\n`);
    await expect(refreshed(dir)).rejects.toMatchObject({ code: 'REPOSITORY_UNSUPPORTED', message: expect.stringContaining('keeps its refs in reftable') as string });
  });
});
