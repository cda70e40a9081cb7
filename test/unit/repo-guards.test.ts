import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GuardRecord, GuardStore } from '../../daemon/guard/guard-store.js';
import { RepoGuards, SETTLE_MS, type GuardTarget } from '../../daemon/guard/repo-guards.js';
import { createLogger } from '../../daemon/os/logger.js';

/**
 * The guard's life around sessions, on a real repository: the watch edge is a fake the test fires
 * (it stands in for fs.watch, whose timing is the kernel's), the store is memory, the wall clock
 * real (file ctimes are compared with it), the monotonic clock and its timers the test's.
 */
let root: string;
beforeAll(() => {
  root = realpathSync(mkdtempSync(path.join(tmpdir(), 'sbx-guards-')));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function repo(name: string): string {
  const dir = path.join(root, name);
  mkdirSync(dir, { recursive: true });
  execFileSync('git', ['init', '-q', '-b', 'main'], { cwd: dir });
  return dir;
}

const git = (cwd: string, ...args: string[]): string => execFileSync('git', ['-c', 'user.name=x', '-c', 'user.email=y', ...args], { cwd, encoding: 'utf8' }).trim();

function target(dir: string): GuardTarget {
  return {
    key: path.join(dir, '.git'),
    scope: { tops: [dir], commonDir: path.join(dir, '.git'), pendingIncludes: [], hooksPaths: [] },
    hooksWritable: false,
    configWritable: false,
    readOnly: [path.join(dir, '.git', 'config'), path.join(dir, '.git', 'hooks')],
  };
}

class Harness {
  readonly watched = new Map<string, () => void>();
  readonly ended: string[][] = [];
  records: GuardRecord[] = [];
  readonly guards: RepoGuards;
  private endedWaiters: (() => void)[] = [];
  private watchWaiters = new Map<string, () => void>();
  /** The monotonic clock: it moves only when the test says. */
  private time = 0;
  private timers: { at: number; work: () => void; cancelled: boolean }[] = [];
  private timerWaiters: (() => void)[] = [];

  constructor() {
    this.guards = new RepoGuards({
      now: () => Date.now(),
      logger: createLogger({ kind: 'silent' }),
      store: this.store(),
      endSessions: (ids) => {
        this.ended.push([...ids]);
        for (const waiter of this.endedWaiters.splice(0)) waiter();
      },
      idleMs: 60_000,
      watch: (dir, onChange) => {
        this.watched.set(dir, onChange);
        this.watchWaiters.get(dir)?.();
        return {
          close: () => {
            this.watched.delete(dir);
          },
        };
      },
      monotonic: () => this.time,
      after: (ms, work) => {
        const timer = { at: this.time + ms, work, cancelled: false };
        this.timers.push(timer);
        for (const waiter of this.timerWaiters.splice(0)) waiter();
        return () => {
          timer.cancelled = true;
        };
      },
    });
  }

  /** Resolves once the guard sets a timer: a check put something off until later. */
  timerSet(): Promise<void> {
    return new Promise((resolve) => this.timerWaiters.push(resolve));
  }

  /** Moves the monotonic clock on and fires the timers that came due. */
  advance(ms: number): void {
    this.time += ms;
    const due = this.timers.filter((timer) => !timer.cancelled && timer.at <= this.time);
    this.timers = this.timers.filter((timer) => !due.includes(timer));
    for (const timer of due) timer.work();
  }

  store(): GuardStore {
    return {
      load: () => Promise.resolve(this.records),
      save: (records) => {
        this.records = records.map((record) => ({ ...record }));
        return Promise.resolve();
      },
    };
  }

  /** What fs.watch would do after a change in `dir`. */
  fire(dir: string): void {
    const onChange = this.watched.get(dir);
    if (onChange === undefined) throw new Error(`${dir} is not watched (watched: ${[...this.watched.keys()].join(', ')})`);
    onChange();
  }

  /** Resolves once `dir` is watched (the first check after `hold` sets the watches up, in the background). */
  watching(dir: string): Promise<void> {
    if (this.watched.has(dir)) return Promise.resolve();
    return new Promise((resolve) => this.watchWaiters.set(dir, resolve));
  }

  sessionsEnded(): Promise<void> {
    return new Promise((resolve) => this.endedWaiters.push(resolve));
  }

  /** The next daemon: what this one recorded, loaded and checked. */
  async restarted(): Promise<Harness> {
    const next = new Harness();
    next.records = this.records;
    await next.guards.start();
    return next;
  }

  async settled(): Promise<void> {
    // `before` on a watched repository waits for nothing; a second hold schedules a check that
    // settles after the one under way: a check that started after everything above.
    await this.guards.close();
  }
}

const quarantinedIn = (dir: string) => readdirSync(dir).filter((name) => name.includes('.sandboxd-quarantine-'));

describe('repository guards', () => {
  it('records the repository before the plan leaves, acts on a change it is told of, and tells the next acquire', async () => {
    const dir = repo('watched');
    const harness = new Harness();
    await harness.guards.hold('ses_a', target(dir));
    expect(harness.records.map((record) => [record.key, record.tops])).toEqual([[path.join(dir, '.git'), [dir]]]);
    await harness.guards.before(dir);
    const ended = harness.sessionsEnded();
    writeFileSync(path.join(dir, '.git', 'commondir'), '/elsewhere\n');
    await harness.watching(path.join(dir, '.git'));
    harness.fire(path.join(dir, '.git'));
    await ended;
    expect(harness.ended).toEqual([['ses_a']]);
    expect(quarantinedIn(path.join(dir, '.git'))).toHaveLength(1);
    expect(harness.records[0]?.warnings[0]).toMatch(/^guard: .*commondir redirects a self-contained git dir .*ses_a/);
    const told = await harness.guards.before(dir);
    expect(told).toHaveLength(1);
    expect(await harness.guards.before(dir)).toEqual([]);
    await harness.settled();
  });

  it('checks a repository nobody watched at the next acquire, and what a previous daemon guarded at start', async () => {
    const dir = repo('restarted');
    const first = new Harness();
    await first.guards.hold('ses_b', target(dir));
    await first.settled();
    // The daemon is gone; a sandbox keeps writing.
    writeFileSync(path.join(dir, '.git', 'commondir'), '/elsewhere\n');
    const second = await first.restarted();
    await second.settled();
    expect(quarantinedIn(path.join(dir, '.git'))).toHaveLength(1);
    // Nobody watches now: an acquire checks first, and hears of it.
    const third = await second.restarted();
    await third.settled();
    writeFileSync(path.join(dir, '.git', 'commondir'), '/again\n');
    const fourth = await third.restarted();
    const warnings = await fourth.guards.before(path.join(dir, 'sub'));
    expect(warnings.some((warning) => warning.includes('commondir redirects'))).toBe(true);
    expect(quarantinedIn(path.join(dir, '.git'))).toHaveLength(2);
    expect(existsSync(path.join(dir, '.git', 'commondir'))).toBe(false);
    await fourth.settled();
  });

  it('no false finding for a fresh repository: its own config and hooks are held read-only, the samples are git\'s', async () => {
    const dir = repo('fresh');
    const harness = new Harness();
    await harness.guards.hold('ses_c', target(dir));
    harness.guards.release('ses_c');
    await harness.settled();
    expect({ ended: harness.ended, moved: quarantinedIn(path.join(dir, '.git')), warnings: harness.records[0]?.warnings }).toEqual({ ended: [], moved: [], warnings: [] });
  });

  it('a repository guarded from one worktree and left alone is checked when a session comes from another of its worktrees', async () => {
    const dir = repo('two-trees');
    const first = new Harness();
    await first.guards.hold('ses_d', target(dir));
    first.guards.release('ses_d');
    await first.settled();
    writeFileSync(path.join(dir, '.git', 'commondir'), '/elsewhere\n');
    const second = await first.restarted();
    await second.settled();
    writeFileSync(path.join(dir, '.git', 'commondir'), '/again\n');
    const third = await second.restarted();
    const other = path.join(root, 'two-trees-wt');
    // `before` finds nothing from there; `hold` knows the repository by its common dir.
    expect(await third.guards.before(other)).toEqual([]);
    const told = await third.guards.hold('ses_e', { ...target(dir), scope: { ...target(dir).scope, tops: [other] } });
    expect(told.filter((warning) => warning.includes('/again') || warning.includes('commondir redirects'))).toHaveLength(told.length);
    expect(told.length).toBeGreaterThan(0);
    expect(existsSync(path.join(dir, '.git', 'commondir'))).toBe(false);
    await third.settled();
  });

  /**
   * Git creates a linked worktree's `commondir` and a submodule's `.git` file and then writes
   * them: a check between the two finds the file empty. That ends no session; the file is looked
   * at again once it had time to settle.
   */
  it.each([
    {
      shape: "a new worktree's commondir",
      name: 'half-commondir',
      setUp: (dir: string) => {
        git(dir, 'commit', '-q', '--allow-empty', '-m', 'init');
        git(dir, 'worktree', 'add', '-q', path.join(root, `${path.basename(dir)}-wt`));
        return path.join(dir, '.git', 'worktrees', `${path.basename(dir)}-wt`, 'commondir');
      },
      written: '../..\n',
    },
    {
      shape: "a submodule's .git file",
      name: 'half-gitfile',
      setUp: (dir: string) => {
        git(dir, 'commit', '-q', '--allow-empty', '-m', 'init');
        git(dir, 'update-index', '--add', '--cacheinfo', `160000,${git(dir, 'rev-parse', 'HEAD')},lib`);
        mkdirSync(path.join(dir, 'lib'));
        return path.join(dir, 'lib', '.git');
      },
      written: 'gitdir: ../.git/modules/lib\n',
    },
  ])('$shape found empty while git writes it ends nothing, and is looked at again once it settles', async ({ name, setUp, written }) => {
    const dir = repo(name);
    const file = setUp(dir);
    const harness = new Harness();
    await harness.guards.hold('ses_f', target(dir));
    await harness.watching(path.dirname(file));
    // Git has created the file and not written it yet.
    writeFileSync(file, '');
    const ended = harness.sessionsEnded();
    const putOff = harness.timerSet();
    harness.fire(path.dirname(file));
    await Promise.race([ended, putOff]);
    expect(harness.ended).toEqual([]);
    writeFileSync(file, written);
    harness.fire(path.dirname(file));
    harness.advance(SETTLE_MS);
    await harness.settled();
    expect({ ended: harness.ended, moved: quarantinedIn(path.dirname(file)), warnings: harness.records[0]?.warnings }).toEqual({ ended: [], moved: [], warnings: [] });
  });

  it('a worktree commondir still empty once it had time to settle is moved aside and ends the sessions; one naming elsewhere at once', async () => {
    const dir = repo('stays-empty');
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'init');
    git(dir, 'worktree', 'add', '-q', path.join(root, 'stays-empty-wt'));
    const admin = path.join(dir, '.git', 'worktrees', 'stays-empty-wt');
    const harness = new Harness();
    await harness.guards.hold('ses_g', target(dir));
    await harness.watching(admin);
    writeFileSync(path.join(admin, 'commondir'), '');
    let ended = harness.sessionsEnded();
    const putOff = harness.timerSet();
    harness.fire(admin);
    await Promise.race([ended, putOff]);
    expect(harness.ended).toEqual([]);
    harness.advance(SETTLE_MS - 1);
    expect(harness.ended).toEqual([]);
    harness.advance(1);
    await ended;
    expect(harness.ended).toEqual([['ses_g']]);
    expect(quarantinedIn(admin)).toHaveLength(1);
    expect(readFileSync(path.join(admin, 'commondir'), 'utf8')).toBe('../..\n');
    harness.guards.release('ses_g');
    // A plant is no half-written file: no time passes before it is acted on.
    await harness.guards.hold('ses_h', target(dir));
    ended = harness.sessionsEnded();
    writeFileSync(path.join(admin, 'commondir'), '/elsewhere\n');
    harness.fire(admin);
    await ended;
    expect(harness.ended).toEqual([['ses_g'], ['ses_h']]);
    expect(quarantinedIn(admin)).toHaveLength(2);
    await harness.settled();
  });
});
