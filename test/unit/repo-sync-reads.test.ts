import { mkdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostGit } from '../../daemon/gitsync/host-git.js';
import { RepoSync } from '../../daemon/gitsync/repo-sync.js';
import { parsePackedRefs, parsePackedRefsInSlices } from '../../daemon/gitsync/sandbox-refs.js';
import { SandboxStore, type SandboxState } from '../../daemon/gitsync/sandbox-store.js';
import { systemTimers } from '../../daemon/os/clock.js';
import { createLogger } from '../../daemon/os/logger.js';
import { runSubprocess } from '../../daemon/os/subprocess.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';

/**
 * What a sync of a sandbox git dir reads, counted where it asks the store for the base's
 * packed-refs: a daemon that starts looks at every sandbox git dir a previous one left, and one
 * with a packed-refs as large as its repository's (hundreds of MB for a hundred thousand refs)
 * must cost that look nothing while nothing changed there, or the first acquire of any other
 * repository waits behind the parse.
 */
const { root, git, repo } = gitFixtures('sbx-reads-');

class CountingStore extends SandboxStore {
  basePackedReads = 0;

  override basePackedRefs(state: SandboxState, pair: { rel: string }): string {
    this.basePackedReads += 1;
    return super.basePackedRefs(state, pair);
  }
}

/** A repository with packed refs and a loose one, its sandbox git dir as a previous daemon's session left it. */
async function leftSandbox(name: string) {
  const dir = repo(name);
  for (let index = 0; index < 50; index += 1) git(dir, 'tag', `t${String(index)}`);
  git(dir, 'pack-refs', '--all');
  git(dir, 'branch', 'loose');
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  const store = new CountingStore(path.join(root(), `state-${name}`), createLogger({ kind: 'silent' }));
  const state = await store.refresh(layout.outer.commonDir, layout.outer.facts);
  // The refresh links the base's packed-refs: only what the syncs ask counts.
  store.basePackedReads = 0;
  state.used = true;
  state.served = [{ rel: '', admin: layout.gitDir, workTree: dir }];
  state.git = { git: 'git', path: process.env.PATH ?? '' };
  const emptyDir = path.join(root(), 'empty');
  mkdirSync(emptyDir, { recursive: true });
  const sync = new RepoSync(
    state,
    {
      store,
      logger: createLogger({ kind: 'silent' }),
      timers: systemTimers,
      watch: () => ({ close: () => undefined }),
      hostGit: (binary, pathVariable) => new HostGit({ run: runSubprocess, git: binary, emptyDir, path: pathVariable }),
      endSessions: () => undefined,
    },
    () => performance.now(),
  );
  // As GitSync.start makes it: the previous daemon's session may still run there.
  sync.orphans = [...state.served];
  return { dir, state, store, sync };
}

describe('a sync of a sandbox git dir', () => {
  it('reads no packed-refs while the sandbox has the refs it started with', async () => {
    const { sync, store } = await leftSandbox('unchanged');
    await sync.schedule();
    await sync.settleOrphans();
    expect(store.basePackedReads).toBe(0);
    expect(sync.status()).toMatchObject({ held: [], error: null });
  });

  it('reads nothing of the sandbox once its repository is gone from the host, and says so', async () => {
    const { dir, state, sync, store } = await leftSandbox('gone');
    // What the sandbox did would need a parse, and a git that can no longer run there.
    unlinkSync(path.join(state.root, 'refs', 'heads', 'loose'));
    rmSync(dir, { recursive: true, force: true });
    await sync.schedule();
    expect(store.basePackedReads).toBe(0);
    expect(sync.status()).toMatchObject({ error: null, notes: [expect.stringContaining('is gone') as string] });
    await sync.settleOrphans();
  });

  it('reads them once a ref changed, and brings the change home', async () => {
    const { dir, state, sync, store } = await leftSandbox('changed');
    git(dir, 'commit', '-q', '--allow-empty', '-m', 'second');
    const second = git(dir, 'rev-parse', 'HEAD');
    git(dir, 'reset', '-q', '--hard', 'HEAD~1');
    // The sandbox makes a branch at a commit the host has (its objects are the host's).
    writeFileSync(path.join(state.root, 'refs', 'heads', 'made'), `${second}\n`);
    await sync.schedule();
    expect(store.basePackedReads).toBeGreaterThan(0);
    expect(git(dir, 'rev-parse', 'refs/heads/made')).toBe(second);
    await sync.settleOrphans();
  });

  it('reads them when the sandbox removed a loose ref it started with', async () => {
    const { state, sync, store } = await leftSandbox('removed');
    unlinkSync(path.join(state.root, 'refs', 'heads', 'loose'));
    await sync.schedule();
    expect(store.basePackedReads).toBeGreaterThan(0);
    await sync.settleOrphans();
  });
});

describe('parsePackedRefsInSlices', () => {
  it('answers what the whole parse answers, a slice of whole lines between two turns', async () => {
    const oid = 'a'.repeat(40);
    const lines = ['# pack-refs with: peeled fully-peeled sorted '];
    for (let index = 0; index < 2000; index += 1) lines.push(`${oid} refs/tags/ü-${String(index).padStart(5, '0')}`, `^${'b'.repeat(40)}`);
    const bytes = Buffer.from(`${lines.join('\n')}\n`);
    let turns = 0;
    const sliced = await parsePackedRefsInSlices(bytes, 40, () => {
      turns += 1;
      return Promise.resolve();
    }, 4096);
    expect(sliced).toEqual(parsePackedRefs(bytes, 40));
    expect(sliced.size).toBe(2000);
    // Proportional to the file: every slice gave the event loop a turn.
    expect(turns).toBeGreaterThanOrEqual(Math.floor(bytes.length / 4096) - 1);
  });
});
