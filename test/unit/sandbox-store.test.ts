import { appendFileSync, cpSync, existsSync, lstatSync, mkdirSync, promises as fsPromises, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
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

/** The file system's own functions, which the step test's spies call through. */
const original = { ...fsPromises };

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

describe('SandboxStore renew (the next fresh copy, made in place ahead)', () => {
  const layoutOf = async (dir: string) => {
    const layout = await readRepoLayout(dir, root());
    if (layout === null) throw new Error('no repository');
    return layout.outer;
  };
  // Settled at once: each test's host changes are ones git makes (a rename or a size change), which
  // leave another identity whatever the timestamp tick; the settle rule has its own test.
  const storeOf = (settleMs = 0) => new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }), settleMs);
  /** A copy a session held and ended in, with a witness of it in s/. */
  const usedCopy = async (store: SandboxStore, outer: Awaited<ReturnType<typeof layoutOf>>) => {
    const used = await store.refresh(outer.commonDir, outer.facts);
    used.used = true;
    used.served = [{ rel: '', admin: outer.commonDir, workTree: path.dirname(outer.commonDir) }];
    await store.save(used);
    writeFileSync(path.join(used.root, 'witness'), '');
    return used;
  };

  it("replaces the used copy with the host's state and the daemon's files, recorded as no session's, proven while the host is unchanged", async () => {
    const dir = repo('renewed');
    const store = storeOf();
    const outer = await layoutOf(dir);
    await usedCopy(store, outer);
    const state = await store.renew(outer.commonDir, outer.facts);
    if (state === null) throw new Error('not renewed');
    expect(existsSync(path.join(state.root, 'witness'))).toBe(false);
    expect(state.used).toBe(false);
    expect(readFileSync(path.join(state.root, 'refs', 'heads', 'main'), 'utf8').trim()).toBe(git(dir, 'rev-parse', 'main'));
    expect(readFileSync(path.join(state.root, 'config'), 'utf8').endsWith(SANDBOX_CONFIG_LINES)).toBe(true);
    expect((await store.mountFiles(state)).files.length).toBeGreaterThan(0);
    expect(await store.stillHost(state, outer.facts)).toBe(true);
    // A restarted daemon finds it recorded, and proves it the same way.
    const [loaded] = (await storeOf().loadAll()).filter((found) => found.commonDir === outer.commonDir);
    expect(loaded).toMatchObject({ used: false, served: [], hostPrint: state.hostPrint });
    expect(await storeOf().stillHost(loaded as SandboxState, outer.facts)).toBe(true);
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

  it.each(changes)('is not proven after %s on the host; a refresh copies the change', async (_name, change) => {
    const dir = repo(`spare-${_name.replaceAll(/\W+/g, '-')}`);
    git(dir, 'tag', 'before');
    const store = storeOf();
    const outer = await layoutOf(dir);
    await usedCopy(store, outer);
    const renewed = await store.renew(outer.commonDir, outer.facts);
    if (renewed === null) throw new Error('not renewed');
    change(dir);
    const now = await layoutOf(dir);
    expect(await store.stillHost(renewed, now.facts)).toBe(false);
    const [loaded] = (await storeOf().loadAll()).filter((found) => found.commonDir === outer.commonDir);
    expect(await storeOf().stillHost(loaded as SandboxState, now.facts)).toBe(false);
    const state = await store.refresh(now.commonDir, now.facts);
    expect(readFileSync(path.join(state.root, 'HEAD'), 'utf8')).toBe(readFileSync(path.join(dir, '.git', 'HEAD'), 'utf8'));
    expect(readFileSync(path.join(state.root, 'index'))).toEqual(readFileSync(path.join(dir, '.git', 'index')));
  });

  it('killed or failed at any step, leaves the used copy with its record, or no record: never an unused record of a copy that is not whole', async () => {
    const dir = repo('renew-steps');
    git(dir, 'branch', 'side');
    git(dir, 'pack-refs', '--all');
    git(dir, 'worktree', 'add', '-q', '-b', 'wt', `${dir}-wt`);
    const outer = await layoutOf(dir);
    // Every change the renewal makes on disk, in order: a kill between two is a failure of the second.
    const steps = ['rename', 'mkdir', 'link', 'unlink', 'open', 'copyFile', 'chmod', 'writeFile', 'symlink', 'rm', 'rmdir'] as const;
    let calls = 0;
    let failAt = 0;
    const spies = steps.map((name) =>
      vi.spyOn(fsPromises, name).mockImplementation(((...args: unknown[]) => {
        // A read is no step: a kill cannot make a host file look absent.
        if (name === 'open' && typeof args[1] !== 'string') return (original[name] as (...a: unknown[]) => Promise<unknown>)(...args);
        calls += 1;
        if (calls === failAt) return Promise.reject(Object.assign(new Error(`the step ${name} failed`), { code: 'EIO' }));
        return (original[name] as (...a: unknown[]) => Promise<unknown>)(...args);
      }) as never),
    );
    try {
      // The same steps each time: what earlier copies set aside is gone first.
      const used = async () => {
        await usedCopy(storeOf(), outer);
        await storeOf().emptyAllTrash();
      };
      await used();
      calls = 0;
      const clean = await storeOf().renew(outer.commonDir, outer.facts);
      if (clean === null) throw new Error('not renewed');
      const total = calls;
      const mounted = (await storeOf().mountFiles(clean)).files.length;
      expect(total).toBeGreaterThan(10);
      for (failAt = 1; failAt <= total; failAt += 1) {
        failAt = -failAt;
        await used();
        failAt = -failAt;
        calls = 0;
        // A step whose failure costs nothing is let pass (what was set aside stays in trash/ for later).
        const renewed = await storeOf()
          .renew(outer.commonDir, outer.facts)
          .catch(() => null);
        const [record, ...more] = (await storeOf().loadAll()).filter((found) => found.commonDir === outer.commonDir);
        expect(more).toEqual([]);
        if (record === undefined) continue;
        const witness = existsSync(path.join(record.root, 'witness'));
        if (record.used) {
          // The old record stays only while nothing of its copy moved: the used copy, with what its sandbox wrote.
          expect({ step: failAt, witness, renewed }).toEqual({ step: failAt, witness: true, renewed: null });
          continue;
        }
        // Recorded unused only once whole: the host's state, proven.
        expect({ step: failAt, witness, main: readFileSync(path.join(record.root, 'refs', 'heads', 'wt'), 'utf8').trim(), proven: await storeOf().stillHost(record, outer.facts) }).toEqual({
          step: failAt,
          witness: false,
          main: git(dir, 'rev-parse', 'wt'),
          proven: true,
        });
        expect(readFileSync(path.join(record.root, 'config'), 'utf8').endsWith(SANDBOX_CONFIG_LINES)).toBe(true);
        expect((await storeOf().mountFiles(record)).files.length).toBe(mounted);
      }
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });

  it('touches nothing when the host changed within the settle time (a same-tick change could leave no trace)', async () => {
    const dir = repo('spare-settle');
    const outer = await layoutOf(dir);
    const used = await usedCopy(storeOf(), outer);
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'just now');
    expect(await storeOf(3_600_000).renew(outer.commonDir, outer.facts)).toBeNull();
    expect(existsSync(path.join(used.root, 'witness'))).toBe(true);
    expect((await storeOf().loadAll()).find((found) => found.commonDir === outer.commonDir)?.used).toBe(true);
  });

  it("discards the spare/ a previous daemon version made its copies ahead in", async () => {
    const dir = repo('spare-old');
    const store = storeOf();
    const outer = await layoutOf(dir);
    await store.refresh(outer.commonDir, outer.facts);
    const spare = path.join(store.dirOf(store.keyOf(outer.commonDir)), 'spare');
    mkdirSync(path.join(spare, 's', 'refs'), { recursive: true });
    writeFileSync(path.join(spare, 'spare.json'), '{}');
    await store.discardSpares();
    expect(existsSync(spare)).toBe(false);
    await store.emptyAllTrash();
    expect(readdirSync(path.join(store.dirOf(store.keyOf(outer.commonDir)), 'trash'))).toEqual([]);
  });
});
