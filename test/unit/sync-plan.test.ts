import { describe, expect, it } from 'vitest';
import { planSync, type HostWorktree, type RefChange, type ServedWorktree, type SyncPlanInput } from '../../daemon/gitsync/sync-plan.js';

/**
 * What a sync decides, from the facts it read: a history of commits where `ancestors` says which
 * commit descends from which, the host's refs and worktrees, and what the sandbox changed.
 */
const ADMIN = '/r/.git';
const WT = '/r';

interface World {
  host?: Record<string, string>;
  sandbox?: Record<string, string>;
  /** commit → its ancestors (itself excluded). */
  ancestors?: Record<string, string[]>;
  staged?: string[];
  unfetched?: string[];
  gitlinks?: Record<string, string[]>;
  repositories?: string[];
}

function input(changes: RefChange[], world: World, extra: Partial<SyncPlanInput> = {}): SyncPlanInput {
  const host = world.host ?? {};
  return {
    changes,
    served: [{ admin: ADMIN, workTree: WT, sandboxHead: { kind: 'branch', ref: 'refs/heads/main' } }],
    worktrees: [{ admin: ADMIN, workTree: WT, head: { kind: 'branch', ref: 'refs/heads/main' } }],
    final: false,
    queries: {
      hostValue: (name) => host[name] ?? null,
      sandboxValue: (name) => world.sandbox?.[name] ?? Object.fromEntries(changes.map((change) => [change.name, change.sandbox]))[name] ?? null,
      fetched: (oid) => !(world.unfetched ?? []).includes(oid),
      isAncestor: (a, b) => Promise.resolve(a === b || (world.ancestors?.[b] ?? []).includes(a)),
      stagedOnHost: (admin) => Promise.resolve((world.staged ?? []).includes(admin)),
      addedGitlinks: (_from, to) => Promise.resolve(world.gitlinks?.[to] ?? []),
      holdsRepository: (workTree, file) => Promise.resolve((world.repositories ?? []).includes(`${workTree}/${file}`)),
    },
    ...extra,
  };
}

const main = (base: string | null, sandbox: string): RefChange => ({ name: 'refs/heads/main', base, sandbox });

describe('planSync', () => {
  it('fast-forwards a branch the host still has where the sandbox started, and moves the index with it', async () => {
    const plan = await planSync(input([main('c1', 'c2')], { host: { 'refs/heads/main': 'c1' }, ancestors: { c2: ['c1'] } }));
    expect(plan.refs).toEqual([{ kind: 'update', ref: 'refs/heads/main', from: 'c1', to: 'c2' }]);
    expect(plan.heads).toEqual([{ admin: ADMIN, workTree: WT, head: null, from: { kind: 'branch', ref: 'refs/heads/main' }, index: { from: 'c1', to: 'c2' }, note: null }]);
  });

  it('keeps a diverged branch and leaves HEAD and the index; a sandbox behind a host that went on changes nothing', async () => {
    const diverged = await planSync(input([main('c1', 's2')], { host: { 'refs/heads/main': 'h2' }, ancestors: { s2: ['c1'], h2: ['c1'] } }));
    expect(diverged.refs).toEqual([{ kind: 'hold', ref: 'refs/heads/main', to: 's2', reason: { kind: 'diverged' } }]);
    // HEAD stays on main, whose host value is the host's: the held ref is what the user is told.
    expect(diverged.heads).toEqual([]);
    const behind = await planSync(input([main('c1', 'c0')], { host: { 'refs/heads/main': 'c2' }, ancestors: { c1: ['c0'], c2: ['c1', 'c0'] } }));
    expect(behind.refs).toEqual([]);
  });

  it('rewrites a branch (a rebase, a reset) only while the host still has it where the sandbox started', async () => {
    const reset = await planSync(input([main('c1', 'c0')], { host: { 'refs/heads/main': 'c1' }, ancestors: { c1: ['c0'] } }));
    expect(reset.refs).toEqual([{ kind: 'update', ref: 'refs/heads/main', from: 'c1', to: 'c0', rewrites: true }]);
    const rebased = await planSync(input([main('c1', 'r2')], { host: { 'refs/heads/main': 'c1' }, ancestors: { r2: ['c0'], c1: ['c0'] } }));
    expect(rebased.refs).toEqual([{ kind: 'update', ref: 'refs/heads/main', from: 'c1', to: 'r2', rewrites: true }]);
  });

  it('creates a branch the sandbox made; keeps one the host deleted meanwhile', async () => {
    const made = await planSync(input([{ name: 'refs/heads/new', base: null, sandbox: 'n1' }], { host: { 'refs/heads/main': 'c1' } }));
    expect(made.refs).toEqual([{ kind: 'update', ref: 'refs/heads/new', from: null, to: 'n1' }]);
    const deleted = await planSync(input([{ name: 'refs/heads/old', base: 'o1', sandbox: 'o2' }], { host: { 'refs/heads/main': 'c1' } }));
    expect(deleted.refs).toEqual([{ kind: 'hold', ref: 'refs/heads/old', to: 'o2', reason: { kind: 'deleted' } }]);
  });

  it('keeps a branch checked out in a worktree no session works in, or where the host staged changes', async () => {
    const other: HostWorktree = { admin: `${ADMIN}/worktrees/o`, workTree: '/o', head: { kind: 'branch', ref: 'refs/heads/feature' } };
    const change: RefChange = { name: 'refs/heads/feature', base: 'f1', sandbox: 'f2' };
    const world = { host: { 'refs/heads/main': 'c1', 'refs/heads/feature': 'f1' }, ancestors: { f2: ['f1'] } };
    const elsewhere = await planSync(input([change], world, { worktrees: [{ admin: ADMIN, workTree: WT, head: { kind: 'branch', ref: 'refs/heads/main' } }, other] }));
    expect(elsewhere.refs).toEqual([{ kind: 'hold', ref: 'refs/heads/feature', to: 'f2', reason: { kind: 'checked-out', workTree: '/o' } }]);
    const staged = await planSync(input([main('c1', 'c2')], { host: { 'refs/heads/main': 'c1' }, ancestors: { c2: ['c1'] }, staged: [ADMIN] }));
    expect(staged.refs).toEqual([{ kind: 'hold', ref: 'refs/heads/main', to: 'c2', reason: { kind: 'staged', workTree: WT } }]);
  });

  it("HEAD follows the branch the sandbox checked out once it is the host's too; not when another worktree has it", async () => {
    const served: ServedWorktree[] = [{ admin: ADMIN, workTree: WT, sandboxHead: { kind: 'branch', ref: 'refs/heads/feature' } }];
    const world = { host: { 'refs/heads/main': 'c1' }, sandbox: { 'refs/heads/feature': 'f1' } };
    const follows = await planSync(input([{ name: 'refs/heads/feature', base: null, sandbox: 'f1' }], world, { served }));
    expect(follows.heads).toEqual([{ admin: ADMIN, workTree: WT, head: { kind: 'branch', ref: 'refs/heads/feature' }, from: { kind: 'branch', ref: 'refs/heads/main' }, index: { from: 'c1', to: 'f1' }, note: null }]);
    const taken = await planSync(
      input([], { host: { 'refs/heads/main': 'c1', 'refs/heads/feature': 'f1' }, sandbox: { 'refs/heads/feature': 'f1' } }, {
        served,
        worktrees: [{ admin: ADMIN, workTree: WT, head: { kind: 'branch', ref: 'refs/heads/main' } }, { admin: `${ADMIN}/worktrees/o`, workTree: '/o', head: { kind: 'branch', ref: 'refs/heads/feature' } }],
      }),
    );
    expect(taken.heads[0]).toMatchObject({ head: null, index: null, note: expect.stringContaining('checked out in /o') as string });
  });

  it('a detached HEAD follows once its commit reached the host', async () => {
    const served: ServedWorktree[] = [{ admin: ADMIN, workTree: WT, sandboxHead: { kind: 'detached', oid: 'd1' } }];
    const plan = await planSync(input([], { host: { 'refs/heads/main': 'c1' } }, { served }));
    expect(plan.heads[0]).toMatchObject({ head: { kind: 'detached', oid: 'd1' }, index: { from: 'c1', to: 'd1' } });
    const missing = await planSync(input([], { host: { 'refs/heads/main': 'c1' }, unfetched: ['d1'] }, { served }));
    expect(missing.heads[0]).toMatchObject({ head: null, note: expect.stringContaining('did not reach the host') as string });
  });

  it('a commit whose objects did not arrive is named, not applied', async () => {
    const plan = await planSync(input([main('c1', 'bad')], { host: { 'refs/heads/main': 'c1' }, unfetched: ['bad'] }));
    expect(plan.refs).toEqual([{ kind: 'unfetched', ref: 'refs/heads/main', to: 'bad' }]);
  });

  it('a commit that adds a gitlink waits while sessions run; at the end it is applied, or kept when the work tree holds a repository there', async () => {
    const world = { host: { 'refs/heads/main': 'c1' }, ancestors: { c2: ['c1'] }, gitlinks: { c2: ['vendor/x'] } };
    const running = await planSync(input([main('c1', 'c2')], world));
    expect(running.refs).toEqual([{ kind: 'defer', ref: 'refs/heads/main' }]);
    expect(running.heads).toEqual([]);
    const clean = await planSync(input([main('c1', 'c2')], world, { final: true }));
    expect(clean.refs).toEqual([{ kind: 'update', ref: 'refs/heads/main', from: 'c1', to: 'c2' }]);
    const planted = await planSync(input([main('c1', 'c2')], { ...world, repositories: [`${WT}/vendor/x`] }, { final: true }));
    expect(planted.refs).toEqual([{ kind: 'hold', ref: 'refs/heads/main', to: 'c2', reason: { kind: 'gitlink', path: 'vendor/x', workTree: WT } }]);
    expect(planted.heads).toEqual([]);
  });

  it('tags are only made, never moved; the stash moves only from where the sandbox found it', async () => {
    const tag = { name: 'refs/tags/v1', base: null, sandbox: 't1' };
    expect((await planSync(input([tag], { host: {} }))).refs).toEqual([{ kind: 'update', ref: 'refs/tags/v1', from: null, to: 't1' }]);
    expect((await planSync(input([tag], { host: { 'refs/tags/v1': 't0' } }))).refs).toEqual([{ kind: 'hold', ref: 'refs/tags/v1', to: 't1', reason: { kind: 'exists' } }]);
    const stash = { name: 'refs/stash', base: 's0', sandbox: 's1' };
    expect((await planSync(input([stash], { host: { 'refs/stash': 's0' } }))).refs).toEqual([{ kind: 'update', ref: 'refs/stash', from: 's0', to: 's1' }]);
    expect((await planSync(input([stash], { host: { 'refs/stash': 'sx' } }))).refs).toEqual([{ kind: 'hold', ref: 'refs/stash', to: 's1', reason: { kind: 'moved' } }]);
  });
});
