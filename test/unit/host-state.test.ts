import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LOOK_THREAD } from '../../daemon/composition/edges.js';
import { gitDirPairs } from '../../daemon/gitsync/git-dir-pairs.js';
import { SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { hostState } from '../../daemon/gitsync/state-print.js';
import { systemTimers } from '../../daemon/os/clock.js';
import { LOOKS_HERE, LookWorker, startLookThread, type Looks } from '../../daemon/os/look-worker.js';
import { createLogger } from '../../daemon/os/logger.js';
import { CONFIG_MAX_BYTES, readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';

/**
 * The proof of a copy made ahead as one look-worker request (state-print.ts hostState): the
 * repository's git dirs with their object formats (the configs read by readControlFile's rules),
 * the print, and the object stores git would read, the same whether the real worker thread (the
 * bundled program the daemon starts) or the main thread's own looks answer, on real git dirs.
 */
const { root, git, repo } = gitFixtures('sbx-host-state-');

const workers: LookWorker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((worker) => worker.close()));
});

/** The real worker's answers only: a fallback fails the call, so an answer is the worker's. */
async function workerOnly(): Promise<Looks> {
  if (!existsSync(LOOK_THREAD)) throw new Error(`${LOOK_THREAD} is missing: run npm run build`);
  let online: Promise<void> = Promise.resolve();
  const worker = new LookWorker({
    start: () => {
      const thread = startLookThread(LOOK_THREAD);
      online = new Promise((resolve) => {
        thread.on('message', (message) => {
          if ('ready' in message) resolve();
        });
      });
      return thread;
    },
    timers: systemTimers,
    // Its answers only, however loaded the machine: the bound's fallback would fail the call.
    boundMs: 10_000,
  });
  workers.push(worker);
  worker.start();
  await online;
  return { ask: (request, _fallback) => worker.ask(request, () => Promise.reject(new Error('the worker did not answer'))) };
}

async function factsOf(dir: string) {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  return layout.outer;
}

/** A repository (object format `format`) with a linked worktree, whose objects name stores as git reads alternates. */
function storedRepository(name: string, format: 'sha1' | 'sha256'): { dir: string; stores: string[] } {
  const dir = path.join(root(), name);
  mkdirSync(dir);
  git(dir, 'init', '-q', `--object-format=${format}`, '-b', 'main');
  writeFileSync(path.join(dir, 'f'), name);
  git(dir, 'add', '.');
  git(dir, 'commit', '-q', '-m', 'init');
  git(dir, 'worktree', 'add', '-q', '-b', 'one', `${dir}-one`);
  const store = (suffix: string) => {
    const at = path.join(root(), `${name}-${suffix}`);
    mkdirSync(path.join(at, 'info'), { recursive: true });
    return at;
  };
  const [a, b, c, linkedAlternates] = [store('a'), store('b'), store('c'), store('linked-alternates')];
  symlinkSync(a, path.join(root(), `${name}-a-link`));
  writeFileSync(path.join(root(), `${name}-file`), 'not a store');
  // Absolute, a comment, a store that is not there, a file, relative (against the store that names it).
  writeFileSync(path.join(dir, '.git', 'objects', 'info', 'alternates'), `${a}\n# a comment\n../../../${name}-missing\n${path.join(root(), `${name}-file`)}\n../../../${name}-c\n`);
  // a names b (relative), then the repository's own objects again (each store once).
  writeFileSync(path.join(a, 'info', 'alternates'), `../${name}-b\n${path.join(dir, '.git', 'objects')}\n`);
  // b names a through a link (canonical: a, already found) and a store whose alternates file is a link (not followed).
  writeFileSync(path.join(b, 'info', 'alternates'), `${path.join(root(), `${name}-a-link`)}\n${linkedAlternates}\n`);
  symlinkSync(path.join(b, 'info', 'alternates'), path.join(linkedAlternates, 'info', 'alternates'));
  return { dir, stores: [path.join(dir, '.git', 'objects'), a, b, linkedAlternates, c] };
}

describe('hostState (the proof in one look-worker request)', () => {
  it('answers the same git dirs, object formats, print and object stores on the worker as on the main thread: sha1 and sha256, chained alternates', async () => {
    const looks = await workerOnly();
    for (const format of ['sha1', 'sha256'] as const) {
      const { dir, stores } = storedRepository(`stores-${format}`, format);
      const { facts } = await factsOf(dir);
      const here = await hostState(facts, LOOKS_HERE);
      const there = await hostState(facts, looks);
      expect(there).toEqual(here);
      // The git dirs and formats the daemon's own reader finds.
      expect(here.pairs).toEqual(await gitDirPairs(facts));
      expect(here.pairs.map((pair) => [pair.kind, pair.hexLength])).toEqual([
        ['common', format === 'sha256' ? 64 : 40],
        ['worktree', format === 'sha256' ? 64 : 40],
      ]);
      // Git's order, each store once and canonical; the missing store and the file left out; whether each names alternates.
      expect(here.print?.stores.get('')).toEqual(stores.map((store, index) => ({ store, alternates: index < 4 })));
      expect(here.print?.stores.has(here.pairs[1]?.rel ?? '')).toBe(false);
    }
  });

  it('tells a changed alternate: a store removed, or named, is another print on either thread', async () => {
    const looks = await workerOnly();
    const { dir, stores } = storedRepository('stores-changed', 'sha1');
    const { facts } = await factsOf(dir);
    const before = await hostState(facts, looks);
    rmSync(stores[4] ?? '', { recursive: true });
    const removed = await hostState(facts, looks);
    expect(removed).toEqual(await hostState(facts, LOOKS_HERE));
    expect(removed.print?.print).not.toBe(before.print?.print);
    expect(removed.print?.stores.get('')?.map((known) => known.store)).toEqual(stores.slice(0, 4));
  });

  it('refuses a reftable repository on both threads, as the daemon reads configs', async () => {
    const looks = await workerOnly();
    const dir = repo('reftable');
    const config = path.join(dir, '.git', 'config');
    const { facts } = await factsOf(dir);
    writeFileSync(config, `${readFileSync(config, 'utf8')}[extensions]\n\trefStorage = reftable\n`);
    const refused = { code: 'REPOSITORY_UNSUPPORTED', message: expect.stringContaining('keeps its refs in reftable') as string };
    await expect(hostState(facts, LOOKS_HERE)).rejects.toMatchObject(refused);
    await expect(hostState(facts, looks)).rejects.toMatchObject(refused);
  });

  it('refuses a config swapped for a FIFO, a link or one past the bound, with the same words on both threads (the worker never blocks on the FIFO)', async () => {
    const looks = await workerOnly();
    const dir = repo('swapped');
    const config = path.join(dir, '.git', 'config');
    const { facts } = await factsOf(dir);
    renameSync(config, `${config}.kept`);
    const swaps: [string, () => void][] = [
      [
        'is not a regular file',
        () => {
          execFileSync('mkfifo', [config]);
        },
      ],
      [
        'is a symbolic link',
        () => {
          symlinkSync(`${config}.kept`, config);
        },
      ],
      [
        `is larger than ${CONFIG_MAX_BYTES} bytes`,
        () => {
          writeFileSync(config, `${readFileSync(`${config}.kept`, 'utf8')}#${'x'.repeat(CONFIG_MAX_BYTES)}\n`);
        },
      ],
    ];
    for (const [why, swap] of swaps) {
      rmSync(config, { force: true });
      swap();
      const here = await hostState(facts, LOOKS_HERE).then(
        () => null,
        (error: unknown) => error,
      );
      expect(here).toMatchObject({ code: 'REPOSITORY_UNSAFE', message: expect.stringContaining(why) as string });
      await expect(hostState(facts, looks)).rejects.toEqual(here);
    }
  });

  it("proves a sha256 copy made ahead through the worker, and not once its config names a reftable: the acquire's refresh refuses it", async () => {
    const looks = await workerOnly();
    const { dir } = storedRepository('proven-sha256', 'sha256');
    const outer = await factsOf(dir);
    const stateDir = path.join(root(), 'state-proven');
    const store = new SandboxStore(stateDir, createLogger({ kind: 'silent' }), 0, looks);
    const made = await store.renew(outer.commonDir, outer.facts);
    if (made === null) throw new Error('no copy made');
    expect(made.pairs.map((pair) => pair.hexLength)).toEqual([64, 64]);
    // Proven by a restarted daemon's store from the record alone.
    const restarted = new SandboxStore(stateDir, createLogger({ kind: 'silent' }), 0, looks);
    const [record] = await restarted.loadAll();
    if (record === undefined) throw new Error('no record');
    expect(await restarted.stillHost(record, outer.facts)).toBe(true);
    expect(record.stores?.get('')?.[0]?.store).toBe(path.join(dir, '.git', 'objects'));
    const config = path.join(dir, '.git', 'config');
    writeFileSync(config, `${readFileSync(config, 'utf8')}[extensions]\n\trefStorage = reftable\n`);
    expect(await restarted.stillHost(record, outer.facts)).toBe(false);
    await expect(restarted.refresh(outer.commonDir, outer.facts)).rejects.toMatchObject({ code: 'REPOSITORY_UNSUPPORTED' });
  });
});
