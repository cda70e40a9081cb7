import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GitSync, WATCHED_AHEAD, WATCHES_AHEAD, type HoldInput } from '../../daemon/gitsync/git-sync.js';
import { MAX_WATCHES, RepoSync } from '../../daemon/gitsync/repo-sync.js';
import { SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { systemTimers, type Timers } from '../../daemon/os/clock.js';
import { createLogger } from '../../daemon/os/logger.js';
import { runSubprocess } from '../../daemon/os/subprocess.js';
import { watchDirectory, type WatchEdge } from '../../daemon/os/watch.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { waitFor } from '../helpers.js';
import { gitFixtures } from './git-fixtures.js';
import { ManualTime } from './manual-time.js';

/**
 * GitSync as the daemon drives it, on real repositories, real files and real watches: an acquire
 * in a repository no session holds, and the bound on what a sandbox can make it watch.
 */
const { root, git, repo } = gitFixtures('sbx-gitsync-');
const hostGit = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
const syncs: GitSync[] = [];

afterEach(async () => {
  await Promise.all(syncs.splice(0).map((sync) => sync.close()));
});

function gitSync(ended: (ids: readonly string[], why: string) => void = () => undefined, timers: Timers = systemTimers, watch: WatchEdge = watchDirectory): GitSync {
  mkdirSync(path.join(root(), 'empty'), { recursive: true });
  const sync = new GitSync({
    stateDir: path.join(root(), 'state'),
    emptyDir: path.join(root(), 'empty'),
    logger: createLogger({ kind: 'silent' }),
    run: runSubprocess,
    timers,
    monotonic: () => performance.now(),
    platform: 'linux',
    watch,
    endSessions: ended,
    orphanMs: 60_000,
    // Settled at once: each host change here is one git makes or an append, another identity whatever the tick.
    settleMs: 0,
  });
  syncs.push(sync);
  return sync;
}

async function started(): Promise<GitSync> {
  const sync = gitSync();
  await sync.start();
  return sync;
}

async function input(dir: string): Promise<HoldInput> {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  return { repo: layout, git: hostGit, path: process.env.PATH ?? '' };
}

describe('GitSync, a repository no session holds', () => {
  it('reuses the copy of an acquire that failed before its answer while the host is as it was copied', async () => {
    const dir = repo('reused');
    const sync = await started();
    const first = await sync.hold('ses_a', await input(dir));
    // A witness of this very copy (inode numbers of a removed copy come back).
    writeFileSync(path.join(first.source, 'witness'), '');
    // The acquire failed after the hold: no container got the copy.
    sync.drop('ses_a');
    const second = await sync.hold('ses_b', await input(dir));
    expect(existsSync(path.join(second.source, 'witness'))).toBe(true);
  });

  it('never reuses a copy a session ended in', async () => {
    const dir = repo('ended');
    const sync = await started();
    const first = await sync.hold('ses_a', await input(dir));
    writeFileSync(path.join(first.source, 'witness'), '');
    sync.release('ses_a');
    await sync.ended('ses_a');
    const second = await sync.hold('ses_b', await input(dir));
    expect(existsSync(path.join(second.source, 'witness'))).toBe(false);
  });

  it('an acquire whose record could not be saved leaves no session behind: the copy it ended in is not shared later', async () => {
    const dir = repo('unsaved');
    const sync = await started();
    await sync.hold('ses_a', await input(dir));
    sync.drop('ses_a');
    const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }));
    const record = path.join(store.dirOf(store.keyOf((await input(dir)).repo.outer.commonDir)), 'record.json');
    rmSync(record);
    mkdirSync(path.join(record, 'in-the-way'), { recursive: true });
    await expect(sync.hold('ses_b', await input(dir))).rejects.toThrow();
    // As the session service does when an acquire fails after the hold.
    sync.drop('ses_b');
    rmSync(record, { recursive: true });
    const third = await sync.hold('ses_c', await input(dir));
    writeFileSync(path.join(third.source, 'witness'), '');
    sync.release('ses_c');
    await sync.ended('ses_c');
    const fourth = await sync.hold('ses_d', await input(dir));
    expect(existsSync(path.join(fourth.source, 'witness'))).toBe(false);
  });

  const changes: [string, (dir: string) => void, string, string][] = [
    [
      'info/exclude edited',
      (dir) => {
        appendFileSync(path.join(dir, '.git', 'info', 'exclude'), 'secret\n');
      },
      'info/exclude',
      'secret',
    ],
    ['the config changed', (dir) => git(dir, 'config', 'core.abbrev', '12'), 'config', 'abbrev = 12'],
    [
      'a reflog appended in place',
      (dir) => {
        appendFileSync(path.join(dir, '.git', 'logs', 'HEAD'), 'appended\n');
      },
      'logs/HEAD',
      'appended',
    ],
  ];

  it.each(changes)('copies afresh after %s on the host since a failed acquire, though no ref moved', async (_name, change, file, text) => {
    const dir = repo(`dropped-${file.replaceAll('/', '-')}`);
    const sync = await started();
    await sync.hold('ses_a', await input(dir));
    sync.drop('ses_a');
    change(dir);
    const second = await sync.hold('ses_b', await input(dir));
    expect(readFileSync(path.join(second.source, file), 'utf8')).toContain(text);
  });

  it.each(changes)('copies afresh after %s on the host since a daemon was killed with a copy no session held, though no ref moved', async (_name, change, file, text) => {
    const dir = repo(`killed-${file.replaceAll('/', '-')}`);
    // The killed daemon's last act: a copy made for an acquire that never held it.
    const { repo: layout } = await input(dir);
    await new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }), 0).refresh(layout.outer.commonDir, layout.outer.facts);
    change(dir);
    const sync = await started();
    const held = await sync.hold('ses_a', await input(dir));
    expect(readFileSync(path.join(held.source, file), 'utf8')).toContain(text);
  });
});

describe('GitSync, what acquires set aside', () => {
  it('is removed after a start, not while its first acquires run', async () => {
    const dir = repo('trash');
    const first = gitSync();
    await first.start();
    await first.hold('ses_a', await input(dir));
    first.drop('ses_a');
    await first.close();
    // A daemon killed with an old copy set aside (a copy the container made unreadable stays, with a log line).
    const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }));
    const trash = path.join(store.dirOf(store.keyOf((await input(dir)).repo.outer.commonDir)), 'trash');
    mkdirSync(path.join(trash, 's-left', 'refs'), { recursive: true });
    const time = new ManualTime();
    const next = gitSync(undefined, time.timers);
    await next.start();
    expect(existsSync(path.join(trash, 's-left'))).toBe(true);
    await time.advance(10_000);
    await next.close();
    expect(existsSync(path.join(trash, 's-left'))).toBe(false);
  });
});

describe('GitSync, what a sandbox makes it watch', () => {
  it(`ends the sessions of a sandbox git dir with more than ${MAX_WATCHES} directories of refs`, async () => {
    const dir = repo('watches');
    let why: (reason: string) => void = () => undefined;
    const ended = new Promise<string>((resolve) => {
      why = resolve;
    });
    const sync = gitSync((_ids, reason) => {
      why(reason);
    });
    await sync.start();
    const held = await sync.hold('ses_a', await input(dir));
    // As a container could: many directories of refs, wide and deep.
    for (let index = 0; index < MAX_WATCHES + 8; index += 1) mkdirSync(path.join(held.source, 'refs', 'heads', `d${String(index % 40)}`, `e${String(index)}`), { recursive: true });
    expect(await ended).toContain(`more than ${MAX_WATCHES} directories of refs to watch`);
  });
});

describe('GitSync, the copy made in place once the last session ended', () => {
  /** The watches the daemon has open, and how many events they passed on. */
  function watches() {
    const open = new Set<string>();
    let events = 0;
    const watch: WatchEdge = (dir, onChange) => {
      const watcher = watchDirectory(dir, () => {
        events += 1;
        onChange();
      });
      if (watcher === null) return null;
      open.add(dir);
      return {
        close: () => {
          open.delete(dir);
          watcher.close();
        },
      };
    };
    return { watch, open, under: (root: string) => [...open].filter((dir) => dir === root || dir.startsWith(`${root}/`)).length, events: () => events };
  }

  const recordOf = async (dir: string) => {
    const store = new SandboxStore(path.join(root(), 'state'), createLogger({ kind: 'silent' }));
    const commonDir = (await input(dir)).repo.outer.commonDir;
    return (await store.loadAll()).find((state) => state.commonDir === commonDir);
  };

  /** A session that ran and ended, and the copy made in place after it. */
  async function ranAndEnded(sync: GitSync, dir: string, id: string): Promise<string> {
    const held = await sync.hold(id, await input(dir));
    writeFileSync(path.join(held.source, 'witness'), '');
    sync.release(id);
    await sync.ended(id);
    await waitFor(async () => (await recordOf(dir))?.used === false, 'the copy made in place', 20_000, 10);
    return held.source;
  }

  it('is what the next acquire gets, with no copy and no walk on its path; what its watches see before then starts no sync', async () => {
    const dir = repo('in-place');
    const time = new ManualTime();
    const seen = watches();
    const sync = gitSync(undefined, time.timers, seen.watch);
    await sync.start();
    const source = await ranAndEnded(sync, dir, 'ses_a');
    expect(existsSync(path.join(source, 'witness'))).toBe(false);
    const made = statSync(source).ino;
    expect(seen.under(source)).toBeGreaterThan(0);
    // Only the daemon writes there before a session's answer; an event meanwhile is not a sandbox's work.
    const timers = time.scheduled;
    const events = seen.events();
    writeFileSync(path.join(source, 'refs', 'heads', 'probe'), `${git(dir, 'rev-parse', 'main')}\n`);
    await waitFor(() => seen.events() > events, 'the watch to see it', 10_000, 10);
    expect(time.scheduled).toBe(timers);
    rmSync(path.join(source, 'refs', 'heads', 'probe'));
    const refresh = vi.spyOn(SandboxStore.prototype, 'refresh');
    // The walk that sets watches (private: what the acquire must not run).
    const walk = vi.spyOn(RepoSync.prototype as unknown as { rewatch: () => Promise<void> }, 'rewatch');
    const opened = [...seen.open];
    try {
      const held = await sync.hold('ses_b', await input(dir));
      expect({ source: held.source, ino: statSync(held.source).ino, refreshed: refresh.mock.calls.length, walked: walk.mock.calls.length, watches: [...seen.open] }).toEqual({
        source,
        ino: made,
        refreshed: 0,
        walked: 0,
        watches: opened,
      });
    } finally {
      refresh.mockRestore();
      walk.mockRestore();
    }
    // They are the session's now: what the sandbox does there is brought home.
    const before = seen.events();
    writeFileSync(path.join(source, 'refs', 'heads', 'made'), `${git(dir, 'rev-parse', 'main')}\n`);
    await waitFor(() => seen.events() > before, 'the watch to see it', 10_000, 10);
    expect(time.scheduled).toBeGreaterThan(timers);
  });

  it("says in its record that the session holds it while the print proves it, so the session's add saves nothing more; a copy the print disproves gets its own record", async () => {
    const dir = repo('claimed');
    const sync = await started();
    await ranAndEnded(sync, dir, 'ses_a');
    // The proof held back until the record is written: the record is not waiting behind it.
    const original = Object.getOwnPropertyDescriptor(SandboxStore.prototype, 'stillHost')?.value as SandboxStore['stillHost'];
    const save = vi.spyOn(SandboxStore.prototype, 'save');
    let savedBeforeProof: boolean | null = null;
    const proof = vi.spyOn(SandboxStore.prototype, 'stillHost').mockImplementation(async function (this: SandboxStore, ...args) {
      await waitFor(async () => (await recordOf(dir))?.used === true, 'the record to say the session holds it', 10_000, 5);
      savedBeforeProof = true;
      return original.apply(this, args);
    });
    try {
      const held = await sync.hold('ses_b', await input(dir));
      const record = await recordOf(dir);
      expect({ savedBeforeProof, saves: save.mock.calls.length, used: record?.used, served: record?.served.map((entry) => entry.rel), git: record?.git?.git }).toEqual({ savedBeforeProof: true, saves: 1, used: true, served: [''], git: hostGit });
      writeFileSync(path.join(held.source, 'witness'), '');
      sync.release('ses_b');
      await sync.ended('ses_b');
      await waitFor(async () => (await recordOf(dir))?.used === false, 'the copy made in place', 20_000, 10);
      // The host moves: the record written while the print disproves the copy is replaced by the fresh copy's.
      git(dir, 'branch', 'moved');
      save.mockClear();
      await sync.hold('ses_c', await input(dir));
      const fresh = await recordOf(dir);
      expect({ saves: save.mock.calls.length, used: fresh?.used, moved: fresh?.pairs[0]?.base.loose.has('refs/heads/moved') }).toEqual({ saves: 2, used: true, moved: true });
    } finally {
      proof.mockRestore();
      save.mockRestore();
    }
  });

  it(`keeps idle watches for the ${String(WATCHED_AHEAD)} copies made last, none for a copy with more than ${String(WATCHES_AHEAD)} directories of refs: those acquires walk`, async () => {
    const seen = watches();
    const sync = gitSync(undefined, systemTimers, seen.watch);
    await sync.start();
    const dirs = Array.from({ length: WATCHED_AHEAD + 1 }, (_, index) => repo(`ahead-${String(index)}`));
    const sources: string[] = [];
    for (const [index, dir] of dirs.entries()) sources.push(await ranAndEnded(sync, dir, `ses_${String(index)}`));
    expect(sources.map((source) => seen.under(source) > 0)).toEqual([false, ...sources.slice(1).map(() => true)]);
    const wide = repo('ahead-wide');
    for (let index = 0; index < WATCHES_AHEAD; index += 1) git(wide, 'branch', `d${String(index)}/b`);
    const wideSource = await ranAndEnded(sync, wide, 'ses_wide');
    expect(seen.under(wideSource)).toBe(0);
    // Still watched while no copy made since took its place.
    expect(seen.under(sources[1] ?? '')).toBeGreaterThan(0);
    // Their acquires take the copy made and walk it, as for a copy with no watches.
    expect((await sync.hold('ses_x', await input(dirs[0] ?? ''))).source).toBe(sources[0]);
    expect(seen.under(sources[0] ?? '')).toBeGreaterThan(0);
    expect((await sync.hold('ses_y', await input(wide))).source).toBe(wideSource);
    expect(seen.under(wideSource)).toBeGreaterThan(WATCHES_AHEAD);
  });

  it("leaves the copy a last sync failed in (a restarted daemon syncs it again) for the next acquire to set aside", async () => {
    const dir = repo('failed-last');
    const sync = await started();
    const held = await sync.hold('ses_a', await input(dir));
    writeFileSync(path.join(held.source, 'witness'), '');
    // The sandbox made a branch; where its objects are staged is taken, so the sync fails.
    writeFileSync(path.join(held.source, 'refs', 'heads', 'made'), `${git(dir, 'rev-parse', 'main')}\n`);
    writeFileSync(path.join(path.dirname(held.source), 'stage'), '');
    sync.release('ses_a');
    expect((await sync.ended('ses_a'))?.error).toEqual(expect.any(String));
    await sync.close();
    expect({ used: (await recordOf(dir))?.used, witness: existsSync(path.join(held.source, 'witness')) }).toEqual({ used: true, witness: true });
  });
});
