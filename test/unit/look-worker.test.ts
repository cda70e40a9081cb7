import { EventEmitter } from 'node:events';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprintOf, fingerprintThrough } from '../../daemon/cache/fingerprint-cache.js';
import { LOOK_THREAD } from '../../daemon/composition/edges.js';
import { gitDirConfigs, gitDirPlaces } from '../../daemon/gitsync/git-dir-pairs.js';
import { SandboxStore } from '../../daemon/gitsync/sandbox-store.js';
import { printRequest, statePrint } from '../../daemon/gitsync/state-print.js';
import { systemTimers } from '../../daemon/os/clock.js';
import { LOOK_BOUND_MS, LOOKS_HERE, LookWorker, startLookThread, type LookAnswers, type LookEvent, type LookMessage, type LookReply, type LookRequest, type Looks, type LookThread } from '../../daemon/os/look-worker.js';
import { createLogger } from '../../daemon/os/logger.js';
import { readRepoLayout } from '../../daemon/plan/git/git-repo.js';
import { gitFixtures } from './git-fixtures.js';
import { ManualTime } from './manual-time.js';

/**
 * The daemon's look worker: the real thread (the bundled program `npm run build` writes, which the
 * daemon starts) makes the same looks as the main thread, with the same answer, on real git dirs;
 * a thread that never answers, dies or is closed costs at most the bound, never an answer.
 */
const { root, git, repo } = gitFixtures('sbx-looks-');

const workers: LookWorker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((worker) => worker.close()));
});

/** The real worker, started as the daemon starts it; `threads` collects each thread it starts. */
async function realWorker(threads: LookThread[] = []): Promise<LookWorker> {
  if (!existsSync(LOOK_THREAD)) throw new Error(`${LOOK_THREAD} is missing: run npm run build`);
  const online: Promise<void>[] = [];
  const worker = new LookWorker({
    start: () => {
      const thread = startLookThread(LOOK_THREAD);
      online.push(readyOf(thread));
      threads.push(thread);
      return thread;
    },
    timers: systemTimers,
  });
  workers.push(worker);
  worker.start();
  await Promise.all(online);
  return worker;
}

/** Once `thread`'s program says it is loaded. */
function readyOf(thread: LookThread | undefined): Promise<void> {
  return new Promise((resolve) => {
    thread?.on('message', (message) => {
      if ('ready' in message) resolve();
    });
  });
}

/** The worker's own answers only: a fallback fails the call, so an equal answer is the worker's. */
function workerOnly(worker: Looks): Looks {
  return { ask: (request, _fallback) => worker.ask(request, () => Promise.reject(new Error('the worker did not answer'))) };
}

/** A repository with worktrees and what a hostile or odd git dir holds: links, a FIFO, a missing admin dir, an alternate. */
function oddRepository(name: string): string {
  const dir = repo(name);
  git(dir, 'branch', 'side');
  git(dir, 'tag', 'v1');
  git(dir, 'pack-refs', '--all');
  git(dir, 'branch', 'loose');
  git(dir, 'worktree', 'add', '-q', '-b', 'one', `${dir}-one`);
  git(dir, 'worktree', 'add', '-q', '-b', 'two', `${dir}-two`);
  const gitDir = path.join(dir, '.git');
  symlinkSync('/etc/passwd', path.join(gitDir, 'refs', 'heads', 'linked'));
  symlinkSync('/etc', path.join(gitDir, 'refs', 'linked-dir'));
  symlinkSync('/etc/hostname', path.join(gitDir, 'ORIG_HEAD'));
  execFileSync('mkfifo', [path.join(gitDir, 'refs', 'tags', 'fifo')]);
  mkdirSync(path.join(gitDir, 'rebase-merge', 'deep'), { recursive: true });
  writeFileSync(path.join(gitDir, 'rebase-merge', 'deep', 'msg'), 'x');
  // A linked worktree whose admin dir is gone: its lines say so.
  rmSync(path.join(gitDir, 'worktrees', `${name}-two`), { recursive: true });
  const store = path.join(root(), `${name}-store`);
  mkdirSync(path.join(store, 'info'), { recursive: true });
  writeFileSync(path.join(gitDir, 'objects', 'info', 'alternates'), `${store}\n`);
  return dir;
}

async function placesOf(dir: string) {
  const layout = await readRepoLayout(dir, root());
  if (layout === null) throw new Error('no repository');
  return { outer: layout.outer, places: gitDirPlaces(layout.outer.facts), configs: gitDirConfigs(layout.outer.facts) };
}

describe('the look worker (a real thread)', () => {
  it("prints real git dirs as the main thread does: links, a FIFO, a missing worktree, an alternate, every kind's files", async () => {
    const dir = oddRepository('odd');
    const found = await placesOf(dir);
    expect(found.places.map((place) => place.kind).sort()).toEqual(['common', 'worktree']);
    // And a git dir that is not there (a worktree removed since its facts were read).
    const places = [...found.places, { rel: 'worktrees/gone', host: path.join(dir, '.git', 'worktrees', 'gone'), kind: 'worktree' as const }];
    const worker = await realWorker();
    const here = await statePrint(places, found.configs, LOOKS_HERE);
    const there = await statePrint(places, found.configs, workerOnly(worker));
    expect(here.print).not.toBeNull();
    expect(there).toEqual(here);
    // The lines themselves, not only their hash: the request a print makes, answered on each thread.
    const { request, answer } = await askedPrint(places, found.configs);
    const byWorker = await workerOnly(worker).ask(request, () => Promise.reject(new Error('unused')));
    expect(sortedLines(byWorker)).toEqual(sortedLines(answer));
    const lines = (answer.pairs ?? []).flatMap((pair) => pair.lines);
    expect(lines).toContain(`${path.join(dir, '.git', 'worktrees', 'gone')}:-`);
    expect(lines.some((line) => line.startsWith(path.join(dir, '.git', 'rebase-merge', 'deep', 'msg')))).toBe(true);
    expect(lines.some((line) => line.includes('linked') || line.includes('fifo'))).toBe(false);
  });

  it("refuses past the copy's bound as the main thread does, and prints within it", async () => {
    const dir = oddRepository('bounded');
    const { places, configs } = await placesOf(dir);
    const worker = await realWorker();
    expect((await statePrint(places, configs, LOOKS_HERE, 5)).print).toBeNull();
    expect((await statePrint(places, configs, workerOnly(worker), 5)).print).toBeNull();
    // The worker refuses on its own (no print), and still reads the configs.
    const refused = await workerOnly(worker).ask(printRequest(places, configs, 5), () => Promise.reject(new Error('unused')));
    expect(refused).toEqual({ configs: [{ text: readFileSync(path.join(dir, '.git', 'config'), 'utf8') }], pairs: null });
    const within = await statePrint(places, configs, workerOnly(worker), 10_000);
    expect(within).toEqual(await statePrint(places, configs, LOOKS_HERE, 10_000));
    expect(within.print).not.toBeNull();
  });

  it("fingerprints files as the main thread does (missing, linked, plain)", async () => {
    const dir = repo('stamps');
    symlinkSync(path.join(dir, 'f'), path.join(dir, 'link'));
    const files = [path.join(dir, 'f'), path.join(dir, 'link'), path.join(dir, 'missing'), path.join(dir, 'missing', 'below')];
    const worker = await realWorker();
    expect(await fingerprintThrough(workerOnly(worker))(files)).toBe(await fingerprintOf(files));
  });

  it("proves a copy the main thread printed: the daemon's prints agree whichever thread looked", async () => {
    const dir = oddRepository('spare');
    const { outer } = await placesOf(dir);
    const stateDir = path.join(root(), 'state-spare');
    const logger = createLogger({ kind: 'silent' });
    const worker = await realWorker();
    const made = await new SandboxStore(stateDir, logger, 0).renew(outer.commonDir, outer.facts);
    if (made === null) throw new Error('no copy made');
    expect(await new SandboxStore(stateDir, logger, 0, workerOnly(worker)).stillHost(made, outer.facts)).toBe(true);
    // And a host change shows through the worker's looks.
    const again = await new SandboxStore(stateDir, logger, 0, workerOnly(worker)).renew(outer.commonDir, outer.facts);
    if (again === null) throw new Error('no copy made');
    git(dir, 'branch', 'moved');
    expect(await new SandboxStore(stateDir, logger, 0, workerOnly(worker)).stillHost(again, outer.facts)).toBe(false);
  });

  it('replaces a thread that ended: the request under way is answered on the main thread, the next by a new thread', async () => {
    const dir = repo('replaced');
    const files = [path.join(dir, 'f')];
    const threads: LookThread[] = [];
    const worker = await realWorker(threads);
    const [first] = threads;
    if (first === undefined) throw new Error('no thread');
    const ended = new Promise((resolve) => first.on('exit', resolve));
    await first.terminate();
    await ended;
    // Gone: answered here at once, while the next thread starts.
    expect(await worker.ask({ kind: 'stamps', files }, () => fingerprintOf(files))).toBe(await fingerprintOf(files));
    expect(threads).toHaveLength(2);
    await readyOf(threads[1]);
    expect(await workerOnly(worker).ask({ kind: 'stamps', files }, () => fingerprintOf(files))).toBe(await fingerprintOf(files));
  });
});

/** The print request statePrint makes of `places`, and its answer on the main thread. */
async function askedPrint(places: Awaited<ReturnType<typeof placesOf>>['places'], configs: readonly string[]) {
  const asked: { request: Extract<LookRequest, { kind: 'print' }>; answer: LookAnswers['print'] }[] = [];
  await statePrint(places, configs, {
    ask: async (request, fallback) => {
      const answer = await fallback();
      const made = request as LookRequest;
      if (made.kind === 'print') asked.push({ request: made, answer: answer as LookAnswers['print'] });
      return answer;
    },
  });
  const [first] = asked;
  if (first === undefined) throw new Error('no print request');
  return first;
}

const sortedLines = (answer: LookAnswers['print']) => ({ configs: answer.configs, pairs: answer.pairs?.map((pair) => ({ lines: [...pair.lines].sort(), newestMs: pair.newestMs, stores: pair.stores })) });

/** A thread whose program says it is ready, and then does what the test says with each message. */
class FakeThread extends EventEmitter implements LookThread {
  readonly messages: LookMessage[] = [];
  terminated = false;

  constructor(private readonly onMessage: (thread: FakeThread, message: LookMessage) => void = () => undefined) {
    super();
    queueMicrotask(() => this.emit('message', { ready: true }));
  }

  postMessage(message: LookMessage): void {
    this.messages.push(message);
    this.onMessage(this, message);
  }

  reply(reply: LookReply): void {
    this.emit('message', reply);
  }

  terminate(): Promise<number> {
    this.terminated = true;
    return Promise.resolve(1);
  }

  unref(): void {
    // nothing keeps a test's process open
  }
}

async function fakeWorker(make: () => FakeThread, time = new ManualTime()) {
  const threads: FakeThread[] = [];
  const worker = new LookWorker({
    start: () => {
      const thread = make();
      threads.push(thread);
      return thread;
    },
    timers: time.timers,
  });
  worker.start();
  await new Promise((resolve) => setImmediate(resolve));
  return { worker, threads, time };
}

describe('the look worker (an injected thread)', () => {
  it("a thread that never answers: the bound's fallback answers the right print, and later requests skip the thread", async () => {
    const dir = oddRepository('never');
    const { places, configs } = await placesOf(dir);
    const { worker, threads, time } = await fakeWorker(() => new FakeThread());
    let done = false;
    const printed = statePrint(places, configs, worker).finally(() => {
      done = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(threads[0]?.messages).toHaveLength(1);
    // Nothing answers until the bound passes.
    await time.advance(LOOK_BOUND_MS - 1);
    expect(done).toBe(false);
    await time.advance(1);
    expect(await printed).toEqual(await statePrint(places, configs, LOOKS_HERE));
    // Stuck: the next request is not sent to it, and is answered at once.
    const files = [path.join(dir, 'f')];
    expect(await worker.ask({ kind: 'stamps', files }, () => fingerprintOf(files))).toBe(await fingerprintOf(files));
    expect(threads[0]?.messages).toHaveLength(1);
    expect(time.scheduled).toBe(0);
    // Once it answers again it is used again.
    threads[0]?.reply({ id: 1, answer: [] });
    const asked = worker.ask({ kind: 'stamps', files }, () => Promise.resolve('fallback'));
    expect(threads[0]?.messages).toHaveLength(2);
    threads[0]?.reply({ id: threads[0].messages[1]?.id ?? 0, answer: 'worker' });
    expect(await asked).toBe('worker');
  });

  it('a thread that dies with a request under way: answered on the main thread without waiting for the bound, then replaced', async () => {
    const dir = repo('dies');
    const files = [path.join(dir, 'f')];
    const { worker, threads } = await fakeWorker(() => new FakeThread((thread) => {
        queueMicrotask(() => {
          thread.emit('exit', 1);
        });
      }));
    expect(await worker.ask({ kind: 'stamps', files }, () => fingerprintOf(files))).toBe(await fingerprintOf(files));
    expect(threads).toHaveLength(1);
    // The next request starts another thread; until it is online the main thread answers.
    expect(await worker.ask({ kind: 'stamps', files }, () => Promise.resolve('here'))).toBe('here');
    expect(threads).toHaveLength(2);
  });

  it('a thread that keeps failing is given up: every request on the main thread, no thread started per request', async () => {
    const events: LookEvent[] = [];
    const threads: FakeThread[] = [];
    const worker = new LookWorker({
      start: () => {
        const thread = new FakeThread((broken) => {
          broken.emit('error', new Error('broken'));
        });
        threads.push(thread);
        return thread;
      },
      timers: new ManualTime().timers,
    });
    worker.start((event) => events.push(event));
    for (let round = 0; round < 10; round += 1) {
      await new Promise((resolve) => setImmediate(resolve));
      expect(await worker.ask({ kind: 'stamps', files: [] }, () => Promise.resolve('here'))).toBe('here');
    }
    expect(threads).toHaveLength(4);
    expect(events.filter((event) => event.kind === 'gone')).toHaveLength(3);
    expect(events.at(-1)).toEqual({ kind: 'given-up' });
  });

  it("an error the thread answers sends the request to the main thread's looks", async () => {
    const { worker } = await fakeWorker(() => new FakeThread((thread, message) => {
        queueMicrotask(() => {
          thread.reply({ id: message.id, error: 'EACCES' });
        });
      }));
    expect(await worker.ask({ kind: 'stamps', files: [] }, () => Promise.resolve('here'))).toBe('here');
  });

  it('close ends the thread, answers what was under way on the main thread, and leaves later requests there', async () => {
    const { worker, threads, time } = await fakeWorker(() => new FakeThread());
    const asked = worker.ask({ kind: 'stamps', files: [] }, () => Promise.resolve('here'));
    await worker.close();
    expect(await asked).toBe('here');
    expect(threads[0]?.terminated).toBe(true);
    expect(await worker.ask({ kind: 'stamps', files: [] }, () => Promise.resolve('after'))).toBe('after');
    expect(threads).toHaveLength(1);
    expect(time.scheduled).toBe(0);
  });
});
