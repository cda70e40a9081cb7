import path from 'node:path';
import type { Logger } from '../os/logger.js';
import { Check, type CheckOutcome, type GuardScope } from './check.js';
import { identity, lstatOrNull } from './fs-edge.js';
import { MAX_GUARD_RECORDS, type GuardRecord, type GuardStore } from './guard-store.js';
import { quarantine, quarantineStamp, type Quarantined } from './quarantine.js';
import type { Finding, Trust } from './rules.js';

/** What one session's plan lets its sandbox reach in a repository. */
export interface GuardTarget {
  /** The common dir, or the work tree when there is no repository. */
  key: string;
  scope: Omit<GuardScope, 'hooksWritable' | 'configWritable'>;
  hooksWritable: boolean;
  configWritable: boolean;
  /** Targets of the plan's read-only mounts that protect the repository. */
  readOnly: readonly string[];
}

export interface Watcher {
  close(): void;
}

export interface RepoGuardsDeps {
  /** Wall-clock ms: file ctimes, which the cutoff is compared with, are wall-clock. */
  now(): number;
  logger: Logger;
  store: GuardStore;
  /** Ends the sessions (their containers are removed): a repository they mount held a plant. */
  endSessions(sessionIds: readonly string[]): void;
  /** How long a repository stays watched after its last session (a quick next session needs no check). */
  idleMs: number;
  /** `fs.watch` of one directory; null when it cannot be watched (gone, or out of watches). */
  watch(dir: string, onChange: () => void): Watcher | null;
  /** Monotonic ms: when a check began, and how long a half-written file has been seen. */
  monotonic(): number;
  /** Runs `work` once after `ms` without keeping the process alive; returns its cancel. */
  after(ms: number, work: () => void): () => void;
}

/**
 * Files a session changes while the guard starts watching carry a ctime a little before the
 * wall clock reads (the kernel stamps files with a coarse clock): the cutoff leans back by this.
 */
const CUTOFF_MARGIN_MS = 1_000;
/** A repository left alone this long is forgotten: the next session starts afresh. */
const DORMANT_MS = 24 * 60 * 60 * 1000;
/** A check that began this recently (the one `before` ran for the same acquire) is not repeated by `hold`. */
const RECHECK_AFTER_MS = 1_000;
/** Directories watched per repository; past this the check at release and acquire is what remains. */
const MAX_WATCHES = 1024;
/**
 * How long a file git may be half-way through writing (an empty `.git` file or `commondir`) may
 * stay so before it is acted on: git writes one right after creating it, so only a loaded machine
 * stretches the gap, and never this far. Nothing is lost meanwhile: empty, git refuses the file,
 * and any write to it is a change that sets off the next check.
 */
export const SETTLE_MS = 2_000;

interface Held {
  protected: Map<string, string>;
}

interface Repo {
  key: string;
  commonDir: string | null;
  tops: Set<string>;
  pendingIncludes: Set<string>;
  hooksPaths: Set<string>;
  hooksWritable: boolean;
  configWritable: boolean;
  cutoffMs: number;
  /** Read-only in every session's plan since the record began (path → its directory's identity). */
  protected: Map<string, string> | null;
  sessions: Map<string, Held>;
  warnings: string[];
  touchedAt: number;
  watchers: Map<string, { watcher: Watcher; identity: string }>;
  idleTimer: NodeJS.Timeout | null;
  running: Promise<void> | null;
  again: boolean;
  deep: boolean;
  /** Bounds reached by the last check, already logged. */
  incomplete: string;
  /** Monotonic ms when the last finished check began. */
  checkedAt: number;
  /** Half-written findings by path: monotonic ms when first seen. */
  halfWritten: Map<string, number>;
  /** The check that looks at them again once they had time to settle. */
  recheck: { at: number; deep: boolean; cancel: () => void } | null;
}

function inside(file: string, dir: string): boolean {
  return file === dir || file.startsWith(`${dir}/`);
}

async function dirIdentity(dir: string): Promise<string | null> {
  const stat = await lstatOrNull(dir).catch(() => null);
  return stat === null ? null : identity(stat);
}

/**
 * One guard per repository that sandboxes can write (DESIGN §9): what cannot be mounted read-only
 * because it does not exist yet (a plain clone's `commondir`, a new worktree's admin dir, a new
 * submodule's git dir and hooks, alternates, a nested `.git` reached through a gitlink) is looked
 * for while sessions hold the repository (directory watches: git renames its files into place, so
 * every change is an event there), when the last one ends (also every `.git` in the work tree),
 * at the next acquire when nobody watched, and at daemon start. What is found is moved aside, the
 * sessions mounting the repository end (their containers are removed), the daemon log says so at
 * error level and the next plan for the repository carries it in its warnings.
 */
export class RepoGuards {
  private readonly repos = new Map<string, Repo>();
  private closed = false;
  /** What a previous daemon recorded is in before any session is guarded. */
  private ready: Promise<void> = Promise.resolve();

  constructor(private readonly deps: RepoGuardsDeps) {}

  /** Daemon start: what a previous daemon guarded is checked (deep) before its sessions come back. */
  async start(): Promise<void> {
    this.ready = (async () => {
      const now = this.deps.now();
      for (const record of await this.deps.store.load()) {
        if (now - record.touchedAt > DORMANT_MS || this.repos.has(record.key)) continue;
        const repo = this.fromRecord(record);
        this.repos.set(record.key, repo);
        void this.schedule(repo, true);
      }
    })();
    await this.ready;
  }

  /**
   * Before a plan for `cwd`: a repository nobody watched since its last session is checked now, so
   * what a sandbox left there is moved aside before this plan; returns the findings not told yet.
   */
  async before(cwd: string): Promise<string[]> {
    await this.ready.catch(() => undefined);
    const repo = [...this.repos.values()].find((candidate) => [...candidate.tops].some((top) => inside(cwd, top)));
    if (repo === undefined) return [];
    // While watched, every change already sets off a check: waiting for one would tie this plan to
    // however busy the sandboxes keep the repository.
    if (repo.watchers.size === 0) await this.schedule(repo, false);
    return this.takeWarnings(repo);
  }

  /**
   * The session's plan is about to be handed out: its repository is guarded from now on. A
   * repository nobody watched that `before` could not find from the workdir (another worktree of
   * it was guarded) is checked first; returns the findings not told yet.
   */
  async hold(sessionId: string, target: GuardTarget): Promise<string[]> {
    await this.ready.catch(() => undefined);
    const now = this.deps.now();
    let repo = this.repos.get(target.key);
    let changed = false;
    if (repo !== undefined && repo.watchers.size === 0) {
      if (repo.running !== null) await repo.running;
      else if (this.deps.monotonic() - repo.checkedAt > RECHECK_AFTER_MS) await this.schedule(repo, false);
    }
    if (repo === undefined) {
      this.forgetDormant();
      repo = this.fromRecord({ key: target.key, commonDir: target.scope.commonDir, tops: [], pendingIncludes: [], hooksPaths: [], hooksWritable: false, configWritable: false, cutoffMs: now - CUTOFF_MARGIN_MS, protected: [], warnings: [], touchedAt: now });
      repo.protected = null;
      this.repos.set(target.key, repo);
      changed = true;
    }
    for (const [set, values] of [[repo.tops, target.scope.tops], [repo.pendingIncludes, target.scope.pendingIncludes], [repo.hooksPaths, target.scope.hooksPaths]] as const) {
      for (const value of values) {
        if (!set.has(value)) changed = true;
        set.add(value);
      }
    }
    if ((target.hooksWritable && !repo.hooksWritable) || (target.configWritable && !repo.configWritable)) changed = true;
    repo.hooksWritable ||= target.hooksWritable;
    repo.configWritable ||= target.configWritable;
    const held = await this.protectedBy(target.readOnly);
    const before = repo.protected?.size ?? -1;
    repo.protected = repo.protected === null ? held : new Map([...repo.protected].filter(([file, dir]) => held.get(file) === dir));
    if (repo.protected.size !== before) changed = true;
    repo.sessions.set(sessionId, { protected: held });
    repo.touchedAt = now;
    if (repo.idleTimer !== null) clearTimeout(repo.idleTimer);
    repo.idleTimer = null;
    if (changed) await this.persist();
    // A repository watched with nothing new to look at needs no check per acquire (a burst of
    // sessions on one repository would otherwise keep one running).
    if (changed || repo.watchers.size === 0) {
      void this.schedule(repo, false);
    }
    return this.takeWarnings(repo);
  }

  /** A session ended (any reason): its repository's last session's end is checked deep. */
  release(sessionId: string): void {
    for (const repo of this.repos.values()) {
      if (!repo.sessions.delete(sessionId) || repo.sessions.size > 0) continue;
      repo.touchedAt = this.deps.now();
      void this.schedule(repo, true).then(() => {
        if (repo.sessions.size > 0 || this.closed) return;
        repo.idleTimer = setTimeout(() => {
          repo.idleTimer = null;
          if (repo.sessions.size === 0) this.unwatch(repo);
        }, this.deps.idleMs);
        repo.idleTimer.unref();
      });
    }
  }

  /** Waits for checks under way (a graceful close), then stops watching. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.repos.values()].flatMap((repo) => (repo.running === null ? [] : [repo.running])));
    for (const repo of this.repos.values()) {
      if (repo.idleTimer !== null) clearTimeout(repo.idleTimer);
      repo.recheck?.cancel();
      repo.recheck = null;
      this.unwatch(repo);
    }
  }

  /** Something changed during the last check (read after awaiting it, so not narrowed away). */
  private runAgain(repo: Repo): boolean {
    return repo.again && !this.closed;
  }

  /** Keeps the records under their bound: the longest-idle repository nobody holds goes first. */
  private forgetDormant(): void {
    const dormant = [...this.repos.values()].filter((repo) => repo.sessions.size === 0 && repo.watchers.size === 0 && repo.running === null).sort((a, b) => a.touchedAt - b.touchedAt);
    for (const repo of dormant.slice(0, Math.max(0, this.repos.size - MAX_GUARD_RECORDS + 1))) this.repos.delete(repo.key);
  }

  private takeWarnings(repo: Repo): string[] {
    const warnings = repo.warnings.splice(0);
    if (warnings.length > 0) void this.persist();
    return warnings;
  }

  private async protectedBy(files: readonly string[]): Promise<Map<string, string>> {
    const entries = await Promise.all(files.map(async (file) => [file, await dirIdentity(path.dirname(file))] as const));
    return new Map(entries.filter((entry): entry is readonly [string, string] => entry[1] !== null));
  }

  private trust(repo: Repo): Trust {
    const held = repo.protected ?? new Map<string, string>();
    return {
      cutoffMs: repo.cutoffMs,
      // Its directory is still the one every plan pinned: no sandbox can have replaced the file.
      isProtected: async (file) => {
        const dir = held.get(file);
        return dir !== undefined && (await dirIdentity(path.dirname(file))) === dir;
      },
    };
  }

  /**
   * One check at a time per repository; changes during a check run another one after it. The
   * returned promise settles when a check that started after this call has finished.
   */
  private schedule(repo: Repo, deep: boolean): Promise<void> {
    repo.deep ||= deep;
    if (repo.running !== null) {
      repo.again = true;
      return repo.running;
    }
    const run = async (): Promise<void> => {
      do {
        repo.again = false;
        const wantDeep = repo.deep;
        repo.deep = false;
        try {
          await this.checkOnce(repo, wantDeep);
        } catch (error) {
          this.deps.logger.error({ module: 'guard', repository: repo.key, err: error }, 'the repository check failed');
        }
      } while (this.runAgain(repo));
      // In the same turn as the last look at `again`: a call in between (a caller resumed in the
      // same microtask queue) would set it on a run that is over, and be lost.
      repo.running = null;
    };
    repo.running = run();
    return repo.running;
  }

  private async checkOnce(repo: Repo, deep: boolean): Promise<void> {
    const scope: GuardScope = {
      tops: [...repo.tops],
      commonDir: repo.commonDir,
      pendingIncludes: [...repo.pendingIncludes],
      hooksPaths: [...repo.hooksPaths],
      hooksWritable: repo.hooksWritable,
      configWritable: repo.configWritable,
    };
    const started = this.deps.monotonic();
    repo.checkedAt = started;
    const outcome = await new Check(scope, this.trust(repo), deep).run();
    this.noteIncomplete(repo, outcome);
    if (deep) {
      const ms = Math.round(this.deps.monotonic() - started);
      this.deps.logger.info({ module: 'guard', repository: repo.key, findings: outcome.findings.length, ms }, 'repository checked, work trees included');
    }
    // Watch first, then look again: a change between this check's look and its watch is not lost.
    if ((repo.sessions.size > 0 || repo.idleTimer !== null || repo.watchers.size > 0) && (await this.rewatch(repo, outcome.watch))) repo.again = true;
    const due = this.settled(repo, outcome.findings, deep);
    if (due.length > 0) {
      repo.again = true;
      await this.act(repo, due);
    }
  }

  /**
   * The findings to act on now: all but the half-written ones, which wait until they have been
   * seen for SETTLE_MS; a check at that moment looks again (as deep as the one that saw them).
   * One git finished writing meanwhile is no longer found then, and is forgotten.
   */
  private settled(repo: Repo, findings: readonly Finding[], deep: boolean): Finding[] {
    const now = this.deps.monotonic();
    // Kept while young even when this check did not see them: it may not have looked (not deep).
    const seen = new Map([...repo.halfWritten].filter(([, since]) => now - since < SETTLE_MS));
    const due = findings.filter((finding) => {
      if (finding.halfWritten !== true) return true;
      const since = repo.halfWritten.get(finding.path) ?? now;
      seen.set(finding.path, since);
      return now - since >= SETTLE_MS;
    });
    repo.halfWritten = seen;
    const waiting = [...seen.values()].filter((since) => now - since < SETTLE_MS);
    if (waiting.length > 0) this.recheckAt(repo, Math.min(...waiting) + SETTLE_MS, deep);
    return due;
  }

  private recheckAt(repo: Repo, at: number, deep: boolean): void {
    const pending = repo.recheck;
    if (pending !== null && pending.at <= at) {
      pending.deep ||= deep;
      return;
    }
    pending?.cancel();
    const recheck = {
      at,
      deep: deep || (pending?.deep ?? false),
      cancel: this.deps.after(Math.max(0, at - this.deps.monotonic()), () => {
        repo.recheck = null;
        if (!this.closed) void this.schedule(repo, recheck.deep);
      }),
    };
    repo.recheck = recheck;
  }

  private noteIncomplete(repo: Repo, outcome: CheckOutcome): void {
    const text = outcome.incomplete.join('; ');
    if (text === repo.incomplete) return;
    repo.incomplete = text;
    if (text !== '') this.deps.logger.warn({ module: 'guard', repository: repo.key, incomplete: outcome.incomplete }, 'the repository check reached its bounds');
  }

  private async act(repo: Repo, findings: readonly Finding[]): Promise<void> {
    const stamp = quarantineStamp(this.deps.now());
    const done: Quarantined[] = [];
    for (const finding of findings) done.push(await quarantine(finding, stamp));
    const sessionIds = [...repo.sessions.keys()];
    for (const result of done) {
      this.deps.logger.error(
        { module: 'guard', repository: repo.key, sessionIds, path: result.finding.path, why: result.finding.why, movedTo: result.movedTo, restored: result.restored, error: result.error },
        'a file the sandbox may have planted was found where git reads it',
      );
      const what = result.movedTo === null ? `could not be moved aside (${result.error ?? 'gone'}): remove it by hand` : `was moved to ${result.movedTo}${result.restored ? ' (the right content was written back)' : ''}`;
      repo.warnings.push(`guard: ${result.finding.path} ${result.finding.why}; it ${what}${sessionIds.length > 0 ? `, and the sessions mounting the repository were ended (${sessionIds.join(', ')})` : ''}`);
    }
    repo.warnings.splice(0, Math.max(0, repo.warnings.length - 64));
    await this.persist();
    if (sessionIds.length > 0) this.deps.endSessions(sessionIds);
  }

  /** Watches exactly `dirs` (as they are now); true when a watch was added. */
  private async rewatch(repo: Repo, dirs: readonly string[]): Promise<boolean> {
    const wanted = dirs.slice(0, MAX_WATCHES);
    const identities = await Promise.all(wanted.map(dirIdentity));
    let added = false;
    const keep = new Set<string>();
    for (const [index, dir] of wanted.entries()) {
      const id = identities[index] ?? null;
      if (id === null) continue;
      keep.add(dir);
      const current = repo.watchers.get(dir);
      if (current?.identity === id) continue;
      current?.watcher.close();
      const watcher = this.deps.watch(dir, () => {
        void this.schedule(repo, false);
      });
      if (watcher === null) {
        repo.watchers.delete(dir);
        continue;
      }
      repo.watchers.set(dir, { watcher, identity: id });
      added = true;
    }
    for (const [dir, { watcher }] of repo.watchers) {
      if (keep.has(dir)) continue;
      watcher.close();
      repo.watchers.delete(dir);
    }
    if (dirs.length > MAX_WATCHES) this.noteIncomplete(repo, { findings: [], watch: [], incomplete: [`more than ${MAX_WATCHES} directories to watch`] });
    return added;
  }

  private unwatch(repo: Repo): void {
    for (const { watcher } of repo.watchers.values()) watcher.close();
    repo.watchers.clear();
  }

  private fromRecord(record: GuardRecord): Repo {
    return {
      key: record.key,
      commonDir: record.commonDir,
      tops: new Set(record.tops),
      pendingIncludes: new Set(record.pendingIncludes),
      hooksPaths: new Set(record.hooksPaths),
      hooksWritable: record.hooksWritable,
      configWritable: record.configWritable,
      cutoffMs: record.cutoffMs,
      protected: new Map(record.protected),
      sessions: new Map(),
      warnings: [...record.warnings],
      touchedAt: record.touchedAt,
      watchers: new Map(),
      idleTimer: null,
      running: null,
      again: false,
      deep: false,
      incomplete: '',
      checkedAt: -Infinity,
      halfWritten: new Map(),
      recheck: null,
    };
  }

  private async persist(): Promise<void> {
    const records: GuardRecord[] = [...this.repos.values()]
      .sort((a, b) => b.touchedAt - a.touchedAt)
      .slice(0, MAX_GUARD_RECORDS)
      .map((repo) => ({
        key: repo.key,
        commonDir: repo.commonDir,
        tops: [...repo.tops],
        pendingIncludes: [...repo.pendingIncludes],
        hooksPaths: [...repo.hooksPaths],
        hooksWritable: repo.hooksWritable,
        configWritable: repo.configWritable,
        cutoffMs: repo.cutoffMs,
        protected: [...(repo.protected ?? [])],
        warnings: repo.warnings,
        touchedAt: repo.touchedAt,
      }));
    try {
      await this.deps.store.save(records);
    } catch (error) {
      this.deps.logger.error({ module: 'guard', err: error }, 'cannot record the guarded repositories; a daemon started after a crash will not check them');
    }
  }
}
