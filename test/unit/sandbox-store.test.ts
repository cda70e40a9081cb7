import { appendFileSync, cpSync, existsSync, lstatSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { containerObjectsPath } from '../../daemon/gitsync/git-dir-pairs.js';
import { SANDBOX_CONFIG_LINES, SandboxStore, type SandboxState } from '../../daemon/gitsync/sandbox-store.js';
import { createLogger } from '../../daemon/os/logger.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';

/**
 * The sandbox's git dir as the store makes it from a real repository: copies the container can
 * change (any uid), the daemon's read-only files, what the sandbox started from, and when the host
 * moved.
 */
const { root, git, repo } = gitFixtures('sbx-store-');

async function refreshed(dir: string, settleMs?: number) {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }), settleMs);
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

  it("mounts the daemon's read-only files as it wrote them: each worktree's pointers, a config.worktree only where the host has one", async () => {
    const dir = repo('mount-files');
    git(dir, 'worktree', 'add', '-q', '-b', 'one', `${dir}-one`);
    git(dir, 'worktree', 'add', '-q', '-b', 'two', `${dir}-two`);
    writeFileSync(path.join(dir, '.git', 'worktrees', 'mount-files-one', 'config.worktree'), '[core]\n\tabbrev = 12\n');
    const { store, state } = await refreshed(dir);
    const mounted = (await store.mountFiles(state)).files.map((file) => `${path.relative(state.commonDir, file.target)} ${file.kind}`);
    expect(mounted.sort()).toEqual(
      [
        'config config',
        'objects/info/alternates alternates',
        'worktrees/mount-files-one/commondir pointer',
        'worktrees/mount-files-one/config.worktree config',
        'worktrees/mount-files-one/gitdir pointer',
        'worktrees/mount-files-two/commondir pointer',
        'worktrees/mount-files-two/gitdir pointer',
      ].sort(),
    );
  });

  it("tells when the host moved since a copy no session held: an unchanged repository needs no copy", async () => {
    const dir = repo('moved');
    // Settled at once: a commit renames files into place, another identity whatever the tick.
    const { store, state, layout } = await refreshed(dir, 0);
    expect(await store.stillHost(state, layout.outer.facts)).toBe(true);
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'on the host');
    expect(await store.stillHost(state, layout.outer.facts)).toBe(false);
  });

  it('a copy of a host changed within the settle time, or one a session held, is never taken for the host', async () => {
    const dir = repo('unsettled');
    const recent = await refreshed(dir, 3_600_000);
    expect(recent.state.hostPrint).toBeNull();
    expect(await recent.store.stillHost(recent.state, recent.layout.outer.facts)).toBe(false);
    const settled = await refreshed(dir, 0);
    settled.state.used = true;
    expect(await settled.store.stillHost(settled.state, settled.layout.outer.facts)).toBe(false);
  });

  it('leaves no record of the old copy once it is set aside: the session that holds the new one saves it', async () => {
    const dir = repo('recorded');
    const { store, state, layout } = await refreshed(dir, 0);
    state.used = true;
    await store.save(state);
    expect((await store.loadAll()).map((found) => found.commonDir)).toContain(state.commonDir);
    const next = await store.refresh(state.commonDir, layout.outer.facts);
    // A daemon killed now finds no record saying a session may run in a copy it no longer has.
    expect((await store.loadAll()).map((found) => found.commonDir)).not.toContain(state.commonDir);
    await store.save(next);
    expect((await store.loadAll()).find((found) => found.commonDir === state.commonDir)?.used).toBe(false);
  });

  it('refuses a repository that keeps its refs in a reftable (REPOSITORY_UNSUPPORTED), naming the remedy', async () => {
    const dir = repo('reftable');
    writeFileSync(path.join(dir, '.git', 'config'), `${readFileSync(path.join(dir, '.git', 'config'), 'utf8')}[extensions]\n\trefStorage = reftable\n`);
    await expect(refreshed(dir)).rejects.toMatchObject({ code: 'REPOSITORY_UNSUPPORTED', message: expect.stringContaining('keeps its refs in reftable') as string });
  });
});

describe('SandboxStore spare (the next fresh copy, made ahead)', () => {
  const layoutOf = async (dir: string) => {
    const layout = await readRepoLayout(dir, root());
    if (layout === null) throw new Error('no repository');
    return layout.outer;
  };
  // Settled at once: each test's host changes are ones git makes (a rename or a size change), which
  // leave another identity whatever the timestamp tick; the settle rule has its own test.
  const storeOf = (settleMs = 0) => new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }), settleMs);

  it("is taken when the host is as it was copied: the host's state, the daemon's files, used once", async () => {
    const dir = repo('spare-taken');
    const store = storeOf();
    const outer = await layoutOf(dir);
    expect(await store.prepareSpare(outer.commonDir, outer.facts)).toBe(true);
    const state = await store.takeSpare(outer.commonDir, outer.facts);
    expect(state).not.toBeNull();
    expect(state?.used).toBe(false);
    expect(readFileSync(path.join(state?.root ?? '', 'refs', 'heads', 'main'), 'utf8').trim()).toBe(git(dir, 'rev-parse', 'main'));
    expect(readFileSync(path.join(state?.root ?? '', 'config'), 'utf8').endsWith(SANDBOX_CONFIG_LINES)).toBe(true);
    expect((await store.mountFiles(state as SandboxState)).files.length).toBeGreaterThan(0);
    // Taken, it is the host's state as a fresh copy is: reused while no session held it and the host is unchanged.
    expect(await store.stillHost(state as SandboxState, outer.facts)).toBe(true);
    expect(await store.takeSpare(outer.commonDir, outer.facts)).toBeNull();
  });

  const changes: [string, (dir: string) => void][] = [
    ['a commit (a ref moved)', (dir) => git(dir, 'commit', '-q', '--allow-empty', '-m', 'host')],
    ['a staged file (the index)', (dir) => (writeFileSync(path.join(dir, 'g'), 'g'), git(dir, 'add', 'g'))],
    ['another branch checked out (HEAD)', (dir) => git(dir, 'checkout', '-q', '-b', 'other')],
    ['refs packed (packed-refs)', (dir) => git(dir, 'pack-refs', '--all')],
    ['a ref deleted from packed-refs', (dir) => (git(dir, 'tag', 'gone'), git(dir, 'pack-refs', '--all'), git(dir, 'tag', '-d', 'gone'))],
    [
      'a reflog appended in place',
      (dir) => {
        appendFileSync(path.join(dir, '.git', 'logs', 'HEAD'), 'x\n');
      },
    ],
    [
      'a state file written (FETCH_HEAD)',
      (dir) => {
        writeFileSync(path.join(dir, '.git', 'FETCH_HEAD'), `${git(dir, 'rev-parse', 'main')}\t\tbranch 'main'\n`);
      },
    ],
    [
      'info/exclude edited',
      (dir) => {
        appendFileSync(path.join(dir, '.git', 'info', 'exclude'), 'secret\n');
      },
    ],
    [
      'an operation begun (a state directory made where there was none)',
      (dir) => {
        mkdirSync(path.join(dir, '.git', 'rebase-merge'));
        writeFileSync(path.join(dir, '.git', 'rebase-merge', 'head-name'), 'refs/heads/main\n');
      },
    ],
    [
      'the reflogs swapped for a link to a copy of them',
      (dir) => {
        cpSync(path.join(dir, '.git', 'logs'), path.join(dir, 'logs-copy'), { recursive: true });
        rmSync(path.join(dir, '.git', 'logs'), { recursive: true });
        symlinkSync(path.join(dir, 'logs-copy'), path.join(dir, '.git', 'logs'));
      },
    ],
    ['the config changed', (dir) => git(dir, 'config', 'core.abbrev', '12')],
    // The host is printed while the configs are read for their object formats: a format named meanwhile still shows.
    ['the object format named in the config', (dir) => git(dir, 'config', 'extensions.objectFormat', 'sha256')],
    ['a linked worktree added', (dir) => git(dir, 'worktree', 'add', '-q', `${dir}-wt`)],
  ];

  it.each(changes)('is not taken, nor a copy no session held reused, after %s on the host; a refresh copies the change', async (_name, change) => {
    const dir = repo(`spare-${_name.replaceAll(/\W+/g, '-')}`);
    git(dir, 'tag', 'before');
    const store = storeOf();
    const outer = await layoutOf(dir);
    const unheld = await store.refresh(outer.commonDir, outer.facts);
    expect(await store.prepareSpare(outer.commonDir, outer.facts)).toBe(true);
    change(dir);
    const now = await layoutOf(dir);
    expect(await store.stillHost(unheld, now.facts)).toBe(false);
    expect(await store.takeSpare(now.commonDir, now.facts)).toBeNull();
    const state = await store.refresh(now.commonDir, now.facts);
    expect(readFileSync(path.join(state.root, 'HEAD'), 'utf8')).toBe(readFileSync(path.join(dir, '.git', 'HEAD'), 'utf8'));
    expect(readFileSync(path.join(state.root, 'index'))).toEqual(readFileSync(path.join(dir, '.git', 'index')));
  });

  it('a spare a killed daemon left: a whole one is proven by the next daemon, a half-made one is swept', async () => {
    const dir = repo('spare-restart');
    const outer = await layoutOf(dir);
    expect(await storeOf().prepareSpare(outer.commonDir, outer.facts)).toBe(true);
    expect(await storeOf().takeSpare(outer.commonDir, outer.facts)).not.toBeNull();
    const store = storeOf();
    expect(await store.prepareSpare(outer.commonDir, outer.facts)).toBe(true);
    const spare = path.join(store.dirOf(store.keyOf(outer.commonDir)), 'spare');
    rmSync(path.join(spare, 'spare.json'));
    await storeOf().sweepSpares();
    expect(existsSync(spare)).toBe(false);
    expect(await storeOf().takeSpare(outer.commonDir, outer.facts)).toBeNull();
  });

  it('is not made of a host git dir changed within the settle time (a same-tick change could leave no trace)', async () => {
    const dir = repo('spare-settle');
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'just now');
    const outer = await layoutOf(dir);
    const store = storeOf(3_600_000);
    expect(await store.prepareSpare(outer.commonDir, outer.facts)).toBe(false);
    expect(await store.takeSpare(outer.commonDir, outer.facts)).toBeNull();
  });
});
