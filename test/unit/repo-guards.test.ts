import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GuardRecord, GuardStore } from '../../daemon/guard/guard-store.js';
import { RepoGuards, type GuardTarget } from '../../daemon/guard/repo-guards.js';
import { createLogger } from '../../daemon/os/logger.js';

/**
 * The guard's life around sessions, on a real repository: the watch edge is a fake the test fires
 * (it stands in for fs.watch, whose timing is the kernel's), the store is memory, the clock real
 * (file ctimes are compared with it).
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
    });
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
});
