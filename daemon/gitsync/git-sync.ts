import path from 'node:path';
import type { SessionGit } from '../../shared/contracts/sessions.js';
import type { Timers } from '../os/clock.js';
import type { Logger } from '../os/logger.js';
import type { Looks } from '../os/look-worker.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { gapCheckedWatch, type WatchEdge } from '../os/watch.js';
import type { Platform } from '../../shared/paths.js';
import type { GitRepo, SandboxGitDir, WorkTreePins } from '../plan/git/git.js';
import { gitDirPairs, sandboxPath } from './git-dir-pairs.js';
import { SandboxdError } from '../../shared/errors.js';
import { HostGit } from './host-git.js';
import { indexPrint, workTreePins } from './pins.js';
import { RepoSync, unknownServed, type Served } from './repo-sync.js';
import { copyGitDirState, CopyBudget } from './sandbox-copy.js';
import { SandboxStore, SETTLE_MS, type SandboxState } from './sandbox-store.js';

export interface GitSyncDeps {
  stateDir: string;
  /** An empty directory nobody writes: the host's git looks for hooks there. */
  emptyDir: string;
  logger: Logger;
  run: RunSubprocess;
  timers: Timers;
  monotonic(): number;
  platform: Platform;
  watch: WatchEdge;
  /** Ends sessions whose sandbox git dir exceeded a bound. */
  endSessions(ids: readonly string[], why: string): void;
  /** How long a restarted daemon keeps a sandbox git dir for sessions of the daemon before it (they renew within a lease). */
  orphanMs: number;
  /** How long ago a host's newest change must be for a copy of it to be proven later (SETTLE_MS unless a test says). */
  settleMs?: number;
  /** Where the host's git dirs are looked at for a print (the daemon's look worker; the main thread unless given). */
  looks?: Looks;
}

/** What an acquire needs of the sandbox's git: the mounts, and the git that brings its work home. */
export interface HoldInput {
  repo: GitRepo;
  /** The session's git (null: none found) and PATH. */
  git: string | null;
  path: string;
}

const STATE_WRITE_ERRORS = new Set(['ENOSPC', 'EDQUOT', 'EROFS', 'EIO']);

/** Sessions ended for a bound whose reason is kept for their clients. */
const ENDED_FOR_CAUSE_KEPT = 1024;

/** How many times the next copy is tried for once a repository's last session ended. */
const RENEW_TRIES = 3;

/**
 * Copies made ahead whose watches are set ahead too (the most recently made), and the most
 * directories each may watch so: idle watches stay a small share of the system's (inotify's
 * max_user_watches; on macOS each watched path is in the loop's one FSEvents stream).
 */
export const WATCHED_AHEAD = 8;
export const WATCHES_AHEAD = 64;

/** How long after a start the copies earlier acquires set aside are removed. */
const TRASH_DELAY_MS = 10_000;

/** How long a release waits for its session's last sync before it answers without it. */
const RELEASE_WAIT_MS = 30_000;

/**
 * The sandbox git dirs of every repository sessions run in (DESIGN §8): made or refreshed from the
 * host at an acquire when no session holds one, shared by the sessions on that repository, and
 * brought home by each repository's RepoSync.
 */
export class GitSync {
  private readonly store: SandboxStore;
  private readonly repos = new Map<string, RepoSync>();
  private readonly sessionRepo = new Map<string, string>();
  private readonly endings = new Map<string, Promise<SessionGit>>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly files = new Map<RepoSync, { state: SandboxState; files: ReturnType<SandboxStore['mountFiles']> }>();
  /** The work tree pins of each work tree, while the indexes they came from are unchanged. */
  private readonly pins = new Map<string, { print: string; pins: WorkTreePins }>();
  /** Sessions ended because their sandbox git dir exceeded a bound, with why, for their clients' renewal and release. */
  private readonly endedForCause = new Map<string, SessionGit>();
  /** The last acquire's repository facts per repository: what the next copy is made from. */
  private readonly facts = new Map<string, GitRepo['outer']>();
  /** Work off the acquires' path (copies made ahead, the trash emptied), awaited by close. */
  private readonly spares = new Set<Promise<void>>();
  /** Cancels of the timers that start such work: close cancels what has not started. */
  private readonly later = new Set<() => void>();
  /** Repositories no session holds whose copy made ahead is watched already, oldest first. */
  private readonly watchedAhead = new Set<RepoSync>();
  private closing = false;
  /** What a previous daemon left is known before any acquire decides to refresh a sandbox git dir. */
  private ready: Promise<void> = Promise.resolve();

  /**
   * Where starting or closing a watch can lose what happens meanwhile (macOS), every repository
   * with sessions gets a sync after it: a missed event delays a sync, never skips it.
   */
  private readonly watch: WatchEdge;

  constructor(private readonly deps: GitSyncDeps) {
    this.store = new SandboxStore(deps.stateDir, deps.logger, deps.settleMs, deps.looks);
    this.watch = gapCheckedWatch(deps.platform, deps.watch, () => {
      for (const sync of this.repos.values()) if (sync.live) sync.trigger();
    });
  }

  /**
   * Sandbox git dirs a previous daemon left: one a session held since it was made (the session may
   * still run there) waits `orphanMs` for its sessions to come back, then gets its last sync.
   */
  start(): Promise<void> {
    this.ready = (async () => {
      await this.store.discardSpares();
      // What earlier acquires set aside goes once the start's first acquires are served: removing
      // it competes with them for the file system.
      this.afterDelay(TRASH_DELAY_MS, () => {
        this.track(this.store.emptyAllTrash());
      });
      for (const state of await this.store.loadAll()) {
        if (!state.used || state.served.length === 0) continue;
        const sync = this.repoSync(state);
        sync.orphans = [...state.served];
        this.repos.set(state.key, sync);
        void sync.schedule();
        this.deps.timers.after(this.deps.orphanMs, () => {
          void this.locked(state.key, () => sync.settleOrphans());
        });
      }
    })();
    return this.ready;
  }

  /**
   * The sandbox git dir for a session on `input.repo`: refreshed from the host first when no session
   * holds it and either side changed since; held for the session until it ends.
   */
  async hold(sessionId: string, input: HoldInput): Promise<SandboxGitDir> {
    const { outer } = input.repo;
    const git = input.git;
    if (git === null) {
      throw new SandboxdError('REPOSITORY_UNSUPPORTED', `no git answers on the session's PATH to read ${input.repo.topLevel}'s submodules and bring the sandbox's commits home`, {
        remedy: 'Install git (on a Mac: `xcode-select --install`) or put it on the PATH of the shell that runs the session.',
      });
    }
    await this.ready.catch(() => undefined);
    // Read from the host's index and work tree while the sandbox git dir is made or looked at; a
    // failure fails the acquire, which drops the session again.
    const pinsPending = this.workTreePins(input.repo, new HostGit({ run: this.deps.run, git, emptyDir: this.deps.emptyDir, path: input.path }));
    pinsPending.catch(() => undefined);
    const key = this.store.keyOf(outer.commonDir);
    const files = await this.locked(key, async () => {
      let sync = this.repos.get(key);
      // Its watches, set ahead or not, are this session's from here (or go with a refresh).
      if (sync !== undefined) this.watchedAhead.delete(sync);
      if (sync === undefined || !sync.live) {
        const state = sync?.state ?? (await this.store.loadAll().then((states) => states.find((candidate) => candidate.key === key)));
        // While the copy made ahead (or one every acquire on failed before its answer) is proven the
        // host's state, its record already says this session holds it: the one save the session
        // needs before its answer, off its path. Settled before anything else: a refresh removes
        // the record first, and a daemon killed meanwhile finds a copy that may have run (its
        // next acquire copies afresh), never one taken unproven.
        const held = state !== undefined && !state.used && state.hostPrint !== null ? heldBy(state, servedOf(input.repo), { git, path: input.path }) : undefined;
        const claim = held === undefined ? undefined : this.stateWrite(() => this.store.save(held));
        claim?.catch(() => undefined);
        const fresh = state !== undefined && (await this.store.stillHost(state, outer.facts));
        await claim;
        const next = fresh ? state : await this.stateWrite(() => this.store.refresh(outer.commonDir, outer.facts));
        // What the record says, the session's add finds known: it saves nothing more.
        if (fresh && held !== undefined) Object.assign(next, { used: held.used, served: held.served, git: held.git });
        if (sync === undefined) {
          sync = this.repoSync(next);
          this.repos.set(key, sync);
        } else if (next !== sync.state) {
          sync.reset(next);
        }
      }
      const served = await this.served(sync, input.repo);
      // Known before the add, so a failed acquire's drop finds the session even if the add failed after taking it.
      this.sessionRepo.set(sessionId, key);
      const [, mounts] = await Promise.all([this.stateWrite(() => sync.add(sessionId, served, { git, path: input.path })), this.mountFiles(sync)]);
      this.facts.set(key, outer);
      return { source: sync.state.root, ...mounts };
    });
    return { ...files, target: outer.commonDir, pins: await pinsPending };
  }

  /**
   * The pins of a work tree (pins.ts), asked of git again only when an index they came from or one
   * of the pinned paths (a submodule populated on the host meanwhile) changed.
   */
  private async workTreePins(repo: GitRepo, git: HostGit): Promise<WorkTreePins> {
    const indexes = [repo.gitDir, ...repo.submodules.map((module) => module.dir)];
    const key = `${repo.gitDir}\0${repo.topLevel}`;
    const paths = (pins: WorkTreePins): string[] => [...pins.selfBinds, ...pins.readOnly, ...pins.empty].flatMap((file) => [file, path.join(file, '.git')]);
    const cached = this.pins.get(key);
    if (cached !== undefined && cached.print === (await indexPrint(indexes, paths(cached.pins)))) return cached.pins;
    const pins = await workTreePins(repo, git);
    this.pins.set(key, { print: await indexPrint(indexes, paths(pins)), pins });
    return pins;
  }

  /**
   * A client renews a lease it lost; one this daemon ended because its git work could not come home
   * stays ended, so the client's release still learns why.
   */
  assertRenewable(renews: string): void {
    const why = this.endedForCause.get(renews)?.error;
    if (why === undefined || why === null) return;
    throw new SandboxdError('SESSION_NOT_FOUND', `session ${renews} was ended: ${why}`, {
      remedy: "Start a new session; the sandbox's git dir is made afresh from your repository.",
    });
  }

  /** An acquire that failed after `hold`: the session never ran. */
  drop(sessionId: string): void {
    const key = this.sessionRepo.get(sessionId);
    this.sessionRepo.delete(sessionId);
    if (key !== undefined) this.repos.get(key)?.drop(sessionId);
  }

  /** A session ended: its last sync starts now; `ended` answers what it left. */
  release(sessionId: string): void {
    const key = this.sessionRepo.get(sessionId);
    if (key === undefined) return;
    this.sessionRepo.delete(sessionId);
    const sync = this.repos.get(key);
    if (sync === undefined) return;
    const ending = this.locked(key, () => sync.end(sessionId));
    this.endings.set(sessionId, ending);
    void ending.then(
      () => {
        this.renewAfter(key, sync);
      },
      () => undefined,
    );
    void ending
      .catch((error: unknown) => {
        this.deps.logger.error({ module: 'gitsync', sessionId, err: error }, "the session's last sync failed");
      })
      .finally(() => {
        this.deps.timers.after(RELEASE_WAIT_MS, () => this.endings.delete(sessionId));
      });
  }

  /** What a session that ended left waiting, once its last sync is done (bounded). */
  async ended(sessionId: string): Promise<SessionGit | null> {
    const ending = this.endings.get(sessionId);
    // Its container may take longer to go than the last sync is kept: why it ended is kept longer.
    if (ending === undefined) return this.endedForCause.get(sessionId) ?? null;
    let cancel = (): void => undefined;
    const late = new Promise<null>((resolve) => {
      cancel = this.deps.timers.after(RELEASE_WAIT_MS, () => {
        resolve(null);
      });
    });
    try {
      return await Promise.race([ending.catch(() => null), late]);
    } finally {
      cancel();
    }
  }

  status(sessionId: string): SessionGit | null {
    const key = this.sessionRepo.get(sessionId);
    return key === undefined ? null : (this.repos.get(key)?.status() ?? null);
  }

  /** The sweep: each watched sandbox git dir is looked at for a change the watches missed. */
  async poll(): Promise<void> {
    await Promise.all([...this.repos.values()].map((sync) => sync.poll()));
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const cancel of this.later) cancel();
    this.later.clear();
    await Promise.all([...this.endings.values()].map((ending) => ending.catch(() => undefined)));
    await Promise.all([...this.spares]);
    await Promise.all([...this.repos.values()].map((sync) => sync.close()));
  }

  private repoSync(state: SandboxState): RepoSync {
    return new RepoSync(
      state,
      {
        store: this.store,
        logger: this.deps.logger,
        timers: this.deps.timers,
        watch: (dir, onChange) => this.watch(dir, onChange),
        hostGit: (git, pathVariable) => new HostGit({ run: this.deps.run, git, emptyDir: this.deps.emptyDir, path: pathVariable }),
        endSessions: (ids, why) => {
          for (const id of ids) {
            this.endedForCause.set(id, { repository: state.commonDir, held: [], notes: [], error: why });
            // The oldest goes first: a client asks soon after its container was removed, or never.
            for (const old of this.endedForCause.keys()) {
              if (this.endedForCause.size <= ENDED_FOR_CAUSE_KEPT) break;
              this.endedForCause.delete(old);
            }
          }
          this.deps.endSessions(ids, why);
        },
      },
      () => this.deps.monotonic(),
    );
  }

  /** A full or read-only state dir (a copy, a record) fails the acquire as a container record that cannot be written does. */
  private async stateWrite<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === undefined || !STATE_WRITE_ERRORS.has(code)) throw error;
      throw new SandboxdError('STATE_WRITE_FAILED', `cannot make the sandbox's git dir in ${this.deps.stateDir}: ${(error as Error).message}`, { cause: error });
    }
  }

  /**
   * Once the last session on a repository ended (its last sync done, and it brought everything
   * home or kept it on the host), the next acquire's fresh copy is made in place now, off the
   * launch's path, with its watches and the files the plan mounts: that acquire proves it by the
   * host's print (stillHost) and finds the rest ready. It holds the repository's lock, so an acquire
   * meanwhile waits and proves what it finds. A host that changed too recently to be proven later
   * (the last sync moved its refs) is looked at again once that settled; a last sync that failed
   * leaves the copy as it is (a restarted daemon syncs it again), for the next acquire to set aside.
   */
  private renewAfter(key: string, sync: RepoSync, tries = RENEW_TRIES): void {
    const outer = this.facts.get(key);
    if (this.closing || sync.live || outer === undefined || tries === 0) return;
    const renew = async (): Promise<boolean> => {
      if (sync.live || sync.status().error !== null) return true;
      const state = await this.store.renew(outer.commonDir, outer.facts);
      if (state === null) return false;
      sync.reset(state);
      await Promise.all([this.watchAhead(sync), this.mountFiles(sync).catch(() => undefined)]);
      return true;
    };
    this.track(this.locked(key, renew).then(
      (done) => {
        if (done) return;
        this.afterDelay(SETTLE_MS, () => {
          this.renewAfter(key, sync, tries - 1);
        });
      },
      (error: unknown) => {
        this.deps.logger.warn({ module: 'gitsync', repository: outer.commonDir, err: error }, "the next sandbox git dir could not be made ahead; the next session's acquire copies it");
      },
    ));
  }

  /**
   * The copy made ahead watched now, within WATCHES_AHEAD; the repository that had them longest
   * loses its idle watches past WATCHED_AHEAD (its next acquire walks, as one with none does).
   */
  private async watchAhead(sync: RepoSync): Promise<void> {
    this.watchedAhead.delete(sync);
    if (!(await sync.watchAhead(WATCHES_AHEAD))) return;
    this.watchedAhead.add(sync);
    for (const oldest of this.watchedAhead) {
      if (this.watchedAhead.size <= WATCHED_AHEAD) break;
      this.watchedAhead.delete(oldest);
      oldest.unwatchAhead();
    }
  }

  /** Background work that starts after `ms` unless the daemon closes first. */
  private afterDelay(ms: number, work: () => void): void {
    const cancel = this.deps.timers.after(ms, () => {
      this.later.delete(cancel);
      if (!this.closing) work();
    });
    this.later.add(cancel);
  }

  /** Work off the acquires' path (copies made ahead, emptying the trash) that close waits for; it never rejects. */
  private track(work: Promise<unknown>): void {
    const settled = work.then(
      () => undefined,
      (error: unknown) => {
        this.deps.logger.warn({ module: 'gitsync', err: error }, "a sandbox git dir's background work failed");
      },
    );
    this.spares.add(settled);
    void settled.finally(() => this.spares.delete(settled));
  }

  /**
   * The session's own git dir in the sandbox's: one the sandbox git dir does not have yet (a
   * worktree added on the host while sessions held it) is copied in.
   */
  private async served(sync: RepoSync, repo: GitRepo): Promise<Served[]> {
    const rel = path.relative(repo.outer.commonDir, repo.gitDir);
    if (!sync.state.pairs.some((pair) => pair.rel === rel)) {
      const pair = (await gitDirPairs(repo.outer.facts)).find((candidate) => candidate.rel === rel);
      if (pair !== undefined) {
        const base = await copyGitDirState(pair, sandboxPath(sync.state.root, pair), new CopyBudget(100_000));
        sync.state.pairs.push({ ...pair, base });
        this.files.delete(sync);
      }
    }
    return servedOf(repo);
  }

  private mountFiles(sync: RepoSync): ReturnType<SandboxStore['mountFiles']> {
    const cached = this.files.get(sync);
    if (cached !== undefined && cached.state === sync.state) return cached.files;
    const files = this.store.mountFiles(sync.state);
    files.catch(() => this.files.delete(sync));
    this.files.set(sync, { state: sync.state, files });
    return files;
  }

  /** One refresh or end at a time per repository. */
  private locked<T>(key: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(key) ?? Promise.resolve();
    const next = previous.then(work, work);
    this.locks.set(
      key,
      next.catch(() => undefined),
    );
    return next;
  }
}

/** The git dirs a session on `repo` works in: its own, and the submodules whose work trees lie in its. */
function servedOf(repo: GitRepo): Served[] {
  const modules = repo.submodules.flatMap((module) =>
    module.workTree !== null && module.workTree.startsWith(`${repo.topLevel}/`) ? [{ rel: path.relative(repo.outer.commonDir, module.dir), admin: module.dir, workTree: module.workTree }] : [],
  );
  return [{ rel: path.relative(repo.outer.commonDir, repo.gitDir), admin: repo.gitDir, workTree: repo.topLevel }, ...modules];
}

/** `state` as a session on `served` with `git` holds it: what its record says before the session's answer. */
function heldBy(state: SandboxState, served: readonly Served[], git: { git: string; path: string }): SandboxState {
  return { ...state, used: true, served: [...state.served, ...unknownServed(state, served)], git };
}
