import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { HeldRef, SessionGit } from '../../shared/contracts/sessions.js';
import type { Timers } from '../os/clock.js';
import type { Logger } from '../os/logger.js';
import { listDir, lstatOrNull, readControlFile } from '../os/untrusted-files.js';
import type { Watcher } from '../os/watch.js';
import { readConfigEntries } from '../plan/git/git-repo.js';
import { entryAt } from '../plan/git/git-dir.js';
import { sandboxPath } from './git-dir-pairs.js';
import { gitComplaint, type HostGit } from './host-git.js';
import { addedGitlinks, fetchObjects, holdsRepository, hostRefValues, isAncestor, stagedOnHost, updateRef } from './host-facts.js';
import { ensureStage, stageObjects } from './object-stage.js';
import { fingerprint, type PairState, type SandboxState, type SandboxStore } from './sandbox-store.js';
import { fileIdentity, readHead, readLooseRefs, readPackedRefs, type LooseRef } from './sandbox-refs.js';
import { SyncBound } from './sync-bound.js';
import { planSync, type HeadAction, type HoldReason, type HostWorktree, type RefAction, type RefChange, type ServedWorktree } from './sync-plan.js';

/** Of the git dirs a session works in, those the copy's record does not name yet. */
export function unknownServed(state: Pick<SandboxState, 'served'>, served: readonly Served[]): Served[] {
  return served.filter((entry) => !state.served.some((known) => known.rel === entry.rel && known.workTree === entry.workTree));
}

/** A worktree a session mounts: its host git dir (HEAD, index) and work tree. */
export interface Served {
  /** Its git dir's place in the sandbox's git dir (relative to the common dir). */
  rel: string;
  admin: string;
  workTree: string;
}

export interface RepoSyncDeps {
  store: SandboxStore;
  logger: Logger;
  timers: Timers;
  /** `fs.watch` of one directory; null when it cannot be watched (gone, or out of watches). */
  watch(dir: string, onChange: () => void): Watcher | null;
  /** The host's git, hardened, for the session's git binary and PATH. */
  hostGit(binary: string, pathVariable: string): HostGit;
  /** Ends sessions: their sandbox exceeded a bound, so its work cannot be brought home. */
  endSessions(ids: readonly string[], why: string): void;
}

/** Quiet time after a change before a sync starts, and the longest a change waits for one. */
const DEBOUNCE_MS = 150;
const MAX_WAIT_MS = 500;
/** Directories watched per sandbox git dir; past it the sessions end (fail closed). */
export const MAX_WATCHES = 1024;
const REF_BOUNDS = { maxEntries: 100_000 } as const;
/** How much larger than the host's a sandbox's packed-refs may grow before it is not read. */
const PACKED_REFS_SLACK = 64 * 1024 * 1024;
const MESSAGE = 'sandboxd: from the sandbox';

function shortName(ref: string): string {
  return ref.startsWith('refs/heads/') ? ref.slice('refs/heads/'.length) : ref;
}

/** Where a ref that cannot be applied waits on the host. */
export function keptRefName(sessionId: string, ref: string): string {
  return `refs/sandboxd/${sessionId}/${ref.startsWith('refs/heads/') ? shortName(ref) : ref}`;
}

function reasonText(ref: string, reason: HoldReason): string {
  const name = shortName(ref);
  switch (reason.kind) {
    case 'diverged':
      return `the host's ${name} has commits the sandbox's does not (diverged)`;
    case 'deleted':
      return `${name} was deleted on the host meanwhile`;
    case 'exists':
      return `the host has ${name} with another value`;
    case 'moved':
      return `the host's ${name} changed meanwhile`;
    case 'checked-out':
      return `${name} is checked out in ${reason.workTree}, where the sandbox did not work`;
    case 'staged':
      return `you staged changes in ${reason.workTree}, where ${name} is checked out`;
    case 'gitlink':
      return `it adds the submodule ${reason.path}, and ${path.join(reason.workTree, reason.path)} holds a repository the host did not have: review it before taking the commit in`;
  }
}

/** What takes a kept ref in, run in the repository (`in`: a submodule's work tree, named with `git -C`). */
function takeInCommand(ref: string, kept: string, inDir: string | null): string {
  const git = inDir === null ? 'git' : `git -C ${inDir}`;
  // The work tree may hold the sandbox's files of that commit: the merge stashes and puts them back.
  if (ref.startsWith('refs/heads/')) return `${git} switch ${shortName(ref)} && ${git} merge --autostash ${kept}`;
  if (ref.startsWith('refs/tags/')) return `${git} tag -f ${ref.slice('refs/tags/'.length)} ${kept}`;
  return `${git} stash store -m "from the sandbox" ${kept}`;
}

/** A git dir with its own objects (the common dir or a submodule's) and the worktrees that share them. */
interface Group {
  store: PairState;
  worktrees: PairState[];
}

/** What a sync looks at first in a git dir of the sandbox's (sandboxLook). */
interface SandboxLook {
  loose: Map<string, LooseRef>;
  /** Its packed-refs is the very file the base kept (git replaces packed-refs by rename). */
  packedIsBase: boolean;
}

/** The same names with the same values: the loose refs as the sandbox started with them. */
function sameLooseRefs(loose: ReadonlyMap<string, LooseRef>, base: ReadonlyMap<string, LooseRef>): boolean {
  if (loose.size !== base.size) return false;
  for (const [name, ref] of loose) if (base.get(name)?.oid !== ref.oid) return false;
  return true;
}

function groupsOf(pairs: readonly PairState[]): Group[] {
  const stores = pairs.filter((pair) => pair.kind !== 'worktree');
  const groups = stores.map((store) => ({
    store,
    worktrees: pairs.filter((pair) => pair.kind === 'worktree' && path.dirname(path.dirname(pair.rel)) === (store.rel === '' ? '.' : store.rel)),
  }));
  // Submodules first, deepest first: a superproject's commit names their commits.
  return groups.sort((a, b) => b.store.rel.split('/').length - a.store.rel.split('/').length || b.store.rel.length - a.store.rel.length);
}

/** The work tree a common dir or submodule git dir serves: `<top>/.git`'s top, or its `core.worktree`. */
async function mainWorkTree(pair: PairState): Promise<string | null> {
  const configured = (await readConfigEntries(await entryAt(path.join(pair.host, 'config')))).findLast((entry) => entry.section === 'core' && entry.subsection === null && entry.key === 'worktree')?.value;
  if (configured !== undefined && configured !== null) return path.resolve(pair.host, configured);
  return pair.kind === 'common' && path.basename(pair.host) === '.git' ? path.dirname(pair.host) : null;
}

async function linkedWorkTree(pair: PairState): Promise<string | null> {
  const text = (await readControlFile(path.join(pair.host, 'gitdir'), 4096).catch(() => '')).trim();
  return text === '' ? null : path.dirname(path.resolve(pair.host, text));
}

/**
 * One repository's sandbox git dir and the sessions on it: watches it, brings what the sandbox did
 * home (debounced, one sync at a time, and a last one when a session ends), and keeps what could
 * not be applied, with the reason, for the sessions to report.
 */
export class RepoSync {
  /** Each live session's worktrees: its own, and those of the submodules in its work tree. */
  readonly sessions = new Map<string, Served[]>();
  /** Worktrees a previous daemon's sessions served: they may still be running until `orphansUntil`. */
  orphans: Served[] = [];
  private ending: Served[] = [];
  private endingIds: string[] = [];
  private held = new Map<string, HeldRef>();
  /** What each held ref's kept ref was last set to (by `<git dir>\0<ref>`), so an unchanged one costs no git. */
  private readonly keptValues = new Map<string, string>();
  private notes: string[] = [];
  /** What syncs did that the sessions should hear of (a branch rewritten): kept until no session is left to tell. */
  private events: string[] = [];
  private error: string | null = null;
  /** A bound was exceeded: the error stays until the sandbox git dir is made afresh. */
  private bound = false;
  private readonly loose = new Map<string, Map<string, LooseRef>>();
  private readonly baseValues = new Map<string, Map<string, string>>();
  private readonly watchers = new Map<string, Watcher>();
  private running: Promise<void> | null = null;
  private again = false;
  private timer: { cancel: () => void; since: number } | null = null;
  private lastPrint: string | null = null;
  /**
   * A container may have run in this copy: a session on it ended (it had its answer), or a previous
   * daemon's did. Sessions dropped before their answer did not.
   */
  private ran: boolean;
  /** How many git dirs the last look at the watches covered. */
  private watchedPairs = 0;
  /** The watches were set on a copy no session holds yet (watchAhead): what they see starts no sync. */
  private ahead = false;
  private closed = false;

  constructor(
    public state: SandboxState,
    private readonly deps: RepoSyncDeps,
    private readonly now: () => number,
  ) {
    this.ran = state.used;
  }

  get live(): boolean {
    return this.sessions.size > 0 || this.orphans.length > 0;
  }

  /** The sandbox git dir was made afresh: what was known of the old one goes. */
  reset(state: SandboxState): void {
    // Watches set ahead on the old copy follow it into the trash.
    this.unwatch();
    this.state = state;
    this.ran = state.used;
    this.loose.clear();
    this.baseValues.clear();
    this.held.clear();
    this.keptValues.clear();
    this.notes = [];
    this.events = [];
    this.error = null;
    this.bound = false;
  }

  status(): SessionGit {
    return { repository: this.state.commonDir, held: [...this.held.values()].slice(0, 256), notes: [...this.events, ...this.notes].slice(0, 64), error: this.error };
  }

  /**
   * A session on the sandbox git dir, with the host's git it found (kept in the record so a
   * restarted daemon can bring its sessions' work home; a sync that waited for one runs now).
   */
  async add(sessionId: string, served: Served[], git: { git: string; path: string }): Promise<void> {
    const first = !this.live;
    const waited = this.state.git === null;
    const newGit = this.state.git?.git !== git.git || this.state.git.path !== git.path;
    this.sessions.set(sessionId, served);
    if (first) this.lastPrint = null;
    const unknown = unknownServed(this.state, served);
    // One save, before the session can use it: written once per refresh (and per new worktree or
    // git), a restarted daemon must know the sandbox may have run.
    const saved = unknown.length > 0 || !this.state.used || newGit ? this.save(unknown, git) : undefined;
    if (waited && !first) this.trigger();
    // A session joining live ones finds the watches in place: each sync looks again after it (a
    // directory made meanwhile triggers one); so does the first on a copy watched ahead (only the
    // daemon wrote there since). Otherwise, new git dirs, or watches a bound took away, look now
    // (while the record is saved), and a bound exceeded fails this acquire.
    const ready = (!first || this.ahead) && this.watchers.size > 0 && this.watchedPairs === this.state.pairs.length;
    this.ahead = false;
    const watched = ready ? undefined : this.rewatch();
    // Both settled before a failure is told: a failed acquire's drop must find every watch in place to close.
    const failed = (await Promise.allSettled([saved, watched])).find((outcome) => outcome.status === 'rejected');
    if (failed !== undefined) {
      this.sessions.delete(sessionId);
      throw failed.reason;
    }
  }

  private async save(unknown: readonly Served[], git: { git: string; path: string }): Promise<void> {
    this.state.served.push(...unknown);
    this.state.used = true;
    this.state.git = git;
    await this.deps.store.save(this.state);
  }

  /**
   * Watches set on a fresh copy no session holds yet, so that the first session's acquire finds
   * them in place: until a session's answer only the daemon writes there, and what they see
   * meanwhile starts no sync. None kept (false) past `limit` directories or when a watch cannot be
   * set: that acquire walks, and a bound exceeded fails it, as for any copy.
   */
  async watchAhead(limit: number): Promise<boolean> {
    if (this.live || this.closed) return false;
    try {
      await this.rewatch(limit);
    } catch {
      this.unwatch();
      return false;
    }
    // The repository's lock is held: no session joins meanwhile.
    this.ahead = this.watchers.size > 0;
    return this.ahead;
  }

  /** Idle watches set ahead closed (a bound on how many are kept): the next acquire walks. */
  unwatchAhead(): void {
    if (this.ahead) this.unwatch();
  }

  /** A session that never got its plan: gone without a sync. */
  drop(sessionId: string): void {
    this.sessions.delete(sessionId);
    if (this.live) return;
    this.unwatch();
    // Every session on this copy since it was made failed before its answer: no container got it,
    // so it is as fresh as an unheld copy, and the next acquire may take it if the host is unchanged.
    if (!this.ran) this.state.used = false;
  }

  /** A session ended: its last sync (decides what waited for the end, once none is left); what it left. */
  async end(sessionId: string): Promise<SessionGit> {
    this.ran = true;
    const served = this.sessions.get(sessionId) ?? [];
    this.sessions.delete(sessionId);
    this.ending.push(...served);
    this.endingIds.push(sessionId);
    await this.schedule();
    this.ending = this.ending.filter((entry) => !served.includes(entry));
    this.endingIds = this.endingIds.filter((id) => id !== sessionId);
    const status = this.status();
    if (!this.live) {
      this.unwatch();
      this.events = [];
    }
    return status;
  }

  /** A previous daemon's sessions that did not come back: their last sync. */
  async settleOrphans(): Promise<void> {
    this.ending.push(...this.orphans);
    this.orphans = [];
    await this.schedule();
    this.ending = [];
    if (!this.live) this.unwatch();
  }

  /** The sweep's look: a change the watches missed still gets its sync. */
  async poll(): Promise<void> {
    if (!this.live || this.running !== null) return;
    const print = await fingerprint(this.state.pairs.map((pair) => sandboxPath(this.state.root, pair)));
    if (print !== this.lastPrint) this.trigger();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.timer?.cancel();
    this.timer = null;
    await this.running;
    this.unwatch();
  }

  /** A change in the sandbox's git dir: a sync soon, after a moment of quiet (at most MAX_WAIT_MS). */
  trigger(): void {
    if (this.closed) return;
    const now = this.now();
    const since = this.timer?.since ?? now;
    this.timer?.cancel();
    const wait = Math.max(0, Math.min(DEBOUNCE_MS, since + MAX_WAIT_MS - now));
    this.timer = {
      since,
      cancel: this.deps.timers.after(wait, () => {
        this.timer = null;
        void this.schedule();
      }),
    };
  }

  /** One sync at a time; a change during one runs another after it. Settles once a sync begun after the call is done. */
  schedule(): Promise<void> {
    if (this.running !== null) {
      this.again = true;
      return this.running.then(() => this.running ?? undefined);
    }
    const run = async (): Promise<void> => {
      do {
        this.again = false;
        await this.syncOnce();
      } while (this.runAgain());
      // In the same turn as the last look at `again`: a call in between would set it on a run that is over.
      this.running = null;
    };
    this.running = run();
    return this.running;
  }

  /** A change came during the last sync (read after awaiting it, so not narrowed away). */
  private runAgain(): boolean {
    return this.again && !this.closed;
  }

  private sessionIds(): string[] {
    return [...this.sessions.keys()];
  }

  private async syncOnce(): Promise<void> {
    const final = !this.live;
    try {
      // Watched before anything is read: a change made while this sync reads still triggers the next.
      if (this.live && this.watchers.size === 0) await this.rewatch();
      this.lastPrint = await fingerprint(this.state.pairs.map((pair) => sandboxPath(this.state.root, pair)));
      const notes: string[] = [];
      for (const group of groupsOf(this.state.pairs)) await this.syncGroup(group, final, notes);
      this.notes = [...new Set(notes)];
      if (!this.bound) this.error = null;
      if (this.live) await this.rewatch();
    } catch (error) {
      if (error instanceof SyncBound) {
        this.bound = true;
        this.error = error.message;
        const ids = this.sessionIds();
        this.deps.logger.error({ module: 'gitsync', repository: this.state.commonDir, sessionIds: ids, why: error.message }, "the sandbox's git dir exceeded a bound; its sessions end");
        this.unwatch();
        if (ids.length > 0) this.deps.endSessions(ids, error.message);
        return;
      }
      this.error = (error as Error).message;
      this.deps.logger.error({ module: 'gitsync', repository: this.state.commonDir, err: error }, "the sandbox's git work could not be brought home");
    }
  }

  /**
   * The sandbox's loose refs of a git dir, and whether its packed-refs is still the file its base
   * kept (the same identity): what tells, without reading a packed-refs, that nothing changed.
   */
  private async sandboxLook(pair: PairState): Promise<SandboxLook> {
    const dir = sandboxPath(this.state.root, pair);
    const known = this.loose.get(pair.rel) ?? pair.base.loose;
    const loose = await readLooseRefs(dir, pair.hexLength, known, REF_BOUNDS);
    this.loose.set(pair.rel, loose);
    return { loose, packedIsBase: (await fileIdentity(path.join(dir, 'packed-refs'))) === pair.base.packed };
  }

  /** The sandbox's value of every synced ref of a git dir: its loose refs over its packed-refs. */
  private async sandboxRefs(pair: PairState, look: SandboxLook): Promise<Map<string, string>> {
    const values = new Map<string, string>();
    if (!look.packedIsBase) {
      const packedFile = path.join(sandboxPath(this.state.root, pair), 'packed-refs');
      const hostPacked = (await lstatOrNull(path.join(pair.host, 'packed-refs')).catch(() => null))?.size ?? 0;
      for (const [name, oid] of (await readPackedRefs(packedFile, pair.hexLength, hostPacked + PACKED_REFS_SLACK)) ?? new Map<string, string>()) values.set(name, oid);
    } else {
      for (const [name, oid] of await this.basePacked(pair)) values.set(name, oid);
    }
    for (const [name, ref] of look.loose) values.set(name, ref.oid);
    return values;
  }

  private async basePacked(pair: PairState): Promise<Map<string, string>> {
    const key = `packed:${pair.rel}`;
    const cached = this.baseValues.get(key);
    if (cached !== undefined) return cached;
    const file = this.deps.store.basePackedRefs(this.state, pair);
    const packed = (await readPackedRefs(file, pair.hexLength, Number.MAX_SAFE_INTEGER).catch(() => null)) ?? new Map<string, string>();
    this.baseValues.set(key, packed);
    return packed;
  }

  private async baseRefs(pair: PairState): Promise<Map<string, string>> {
    const values = new Map(await this.basePacked(pair));
    for (const [name, ref] of pair.base.loose) values.set(name, ref.oid);
    return values;
  }

  private servedIn(group: Group): ServedWorktree[] {
    const all = [...[...this.sessions.values()].flat(), ...this.orphans, ...this.ending];
    const rels = new Set([group.store.rel, ...group.worktrees.map((pair) => pair.rel)]);
    const seen = new Set<string>();
    const served: ServedWorktree[] = [];
    for (const entry of all) {
      if (!rels.has(entry.rel) || seen.has(entry.admin)) continue;
      seen.add(entry.admin);
      served.push({ admin: entry.admin, workTree: entry.workTree, sandboxHead: null });
    }
    return served;
  }

  private async hostWorktrees(group: Group): Promise<HostWorktree[]> {
    const list: HostWorktree[] = [];
    for (const pair of [group.store, ...group.worktrees]) {
      const workTree = pair.kind === 'worktree' ? await linkedWorkTree(pair) : await mainWorkTree(pair);
      list.push({ admin: pair.host, workTree: workTree ?? pair.host, head: await readHead(path.join(pair.host, 'HEAD'), pair.hexLength) });
    }
    return list;
  }

  /** The sandbox's refs and what changed from the base. */
  private async refMaps(store: PairState, look: SandboxLook): Promise<{ sandbox: Map<string, string>; changes: RefChange[] }> {
    const [sandbox, base] = await Promise.all([this.sandboxRefs(store, look), this.baseRefs(store)]);
    const changes = [...sandbox].filter(([name, oid]) => base.get(name) !== oid).map(([name, oid]) => ({ name, base: base.get(name) ?? null, sandbox: oid }));
    return { sandbox, changes };
  }

  private async syncGroup(group: Group, final: boolean, notes: string[]): Promise<void> {
    const { store } = group;
    // A repository removed on the host since (a previous daemon's session in a scratch clone):
    // nothing can come home, and its sandbox's refs are not read.
    if ((await fs.stat(store.host).catch(() => null))?.isDirectory() !== true) {
      notes.push(`the repository's git dir ${store.host} is gone: the sandbox's work stays in its own git dir`);
      return;
    }
    const look = await this.sandboxLook(store);
    // The same packed-refs and the same loose refs as the base: no ref changed, and a packed-refs
    // (as large as the host's) is neither read nor parsed, so a sync that has nothing to bring home
    // (the start-up look at a previous daemon's sandbox git dirs) costs a few stats.
    const unchanged = look.packedIsBase && sameLooseRefs(look.loose, store.base.loose);
    let refs = unchanged ? null : await this.refMaps(store, look);
    const changes = refs === null ? [] : refs.changes;
    const served = this.servedIn(group);
    const relOf = new Map([store, ...group.worktrees].map((pair) => [pair.host, pair]));
    for (const entry of served) {
      const pair = relOf.get(entry.admin);
      if (pair !== undefined) entry.sandboxHead = await readHead(path.join(sandboxPath(this.state.root, pair), 'HEAD'), store.hexLength);
    }
    const worktrees = await this.hostWorktrees(group);
    const headsMoved = served.some((entry) => {
      const host = worktrees.find((worktree) => worktree.admin === entry.admin)?.head ?? null;
      return JSON.stringify(entry.sandboxHead) !== JSON.stringify(host);
    });
    if (changes.length === 0 && !headsMoved) {
      this.forgetHeld(group, new Set());
      return;
    }
    if (this.state.git === null) {
      notes.push("no git was found on the session's PATH: the sandbox's commits wait in its git dir until a session with git brings them home");
      return;
    }
    refs ??= await this.refMaps(store, look);
    const { sandbox } = refs;
    const git = this.deps.hostGit(this.state.git.git, this.state.git.path);
    const wanted = new Set(changes.map((change) => change.sandbox));
    for (const entry of served) {
      const head = entry.sandboxHead;
      if (head?.kind === 'detached') wanted.add(head.oid);
      else if (head?.kind === 'branch') {
        const value = sandbox.get(head.ref);
        if (value !== undefined) wanted.add(value);
      }
    }
    const stage = this.deps.store.stageDir(this.state, store);
    await ensureStage(stage, path.join(store.host, 'objects'), store.hexLength);
    await stageObjects(path.join(sandboxPath(this.state.root, store), 'objects'), stage, store.hexLength);
    const fetch = await fetchObjects(git, store.host, stage, [...wanted]);
    const names = new Set([...changes.map((change) => change.name), ...[...served, ...worktrees].flatMap((entry) => {
      const head = 'sandboxHead' in entry ? entry.sandboxHead : entry.head;
      return head?.kind === 'branch' ? [head.ref] : [];
    })]);
    const host = await hostRefValues(git, store.host, [...names], store.hexLength);
    const plan = await planSync({
      changes,
      served,
      worktrees,
      final,
      queries: {
        hostValue: (name) => host.get(name) ?? null,
        sandboxValue: (name) => sandbox.get(name) ?? null,
        fetched: (oid) => fetch.fetched.has(oid),
        isAncestor: (a, b) => isAncestor(git, store.host, a, b),
        stagedOnHost: (admin, commit) => stagedOnHost(git, admin, worktrees.find((worktree) => worktree.admin === admin)?.workTree ?? admin, commit),
        addedGitlinks: (from, to) => addedGitlinks(git, store.host, from, to),
        holdsRepository: (workTree, file) => holdsRepository(workTree, file),
      },
    });
    const kept = new Set<string>();
    const inDir = store.rel === '' ? null : (worktrees[0]?.workTree ?? store.host);
    for (const action of plan.refs) await this.applyRef(git, group, action, fetch.complaint, kept, notes, inDir);
    for (const action of plan.heads) await this.applyHead(git, store, action, notes);
    this.forgetHeld(group, kept);
  }

  /** Held refs of this git dir that this sync did not hold again are settled (applied, or no longer changed). */
  private forgetHeld(group: Group, kept: ReadonlySet<string>): void {
    for (const key of [...this.held.keys()]) {
      if (!key.startsWith(`${group.store.rel}\0`) || kept.has(key)) continue;
      this.held.delete(key);
      this.keptValues.delete(key);
    }
  }

  /** The session a held ref is kept under: a live one, else the one ending. */
  private namingSession(): string {
    return this.sessionIds()[0] ?? this.endingIds[0] ?? 'restarted';
  }

  private async applyRef(git: HostGit, group: Group, action: RefAction, complaint: string | null, kept: Set<string>, notes: string[], workTree: string | null): Promise<void> {
    const { store } = group;
    const log = this.deps.logger.child({ module: 'gitsync', repository: store.host, sessionIds: this.sessionIds() });
    const key = `${store.rel}\0${action.ref}`;
    switch (action.kind) {
      case 'defer':
        return;
      case 'update': {
        if (!(await updateRef(git, store.host, action.ref, action.to, action.from, store.hexLength, MESSAGE))) return;
        log.info({ ref: action.ref, from: action.from, to: action.to, rewrites: action.rewrites === true }, "the sandbox's commit is on the host");
        if (action.rewrites === true && action.from !== null) {
          this.event(`the sandbox rewrote ${shortName(action.ref)} (not a fast-forward): its previous tip ${action.from.slice(0, 12)} is in \`git reflog ${shortName(action.ref)}\``);
        }
        return;
      }
      case 'unfetched': {
        kept.add(key);
        if (this.held.get(key)?.reason.includes(action.to) === true) return;
        const reason = `its commit ${action.to.slice(0, 12)} did not reach the host: ${complaint ?? 'its objects are missing'}`;
        this.held.set(key, { ref: action.ref, keptAs: null, reason, command: null });
        log.warn({ ref: action.ref, to: action.to, why: reason }, "a ref of the sandbox's was not applied");
        return;
      }
      case 'hold': {
        kept.add(key);
        const previous = this.held.get(key);
        const keptAs = previous?.keptAs ?? keptRefName(this.namingSession(), action.ref);
        const known = this.keptValues.get(key) === action.to ? action.to : (await hostRefValues(git, store.host, [keptAs], store.hexLength)).get(keptAs);
        if (known !== action.to) {
          const result = await git.run({ gitDir: store.host }, ['update-ref', '-m', MESSAGE, keptAs, action.to]);
          if (result.exitCode !== 0) throw new Error(`cannot keep the sandbox's ${action.ref} as ${keptAs}: ${gitComplaint(result)}`);
        }
        const reason = reasonText(action.ref, action.reason);
        const held: HeldRef = { ref: action.ref, keptAs, reason: workTree === null ? reason : `${reason} (in the submodule ${workTree})`, command: takeInCommand(action.ref, keptAs, workTree) };
        if (previous?.keptAs !== keptAs || previous.reason !== held.reason || known !== action.to) log.warn({ ref: action.ref, keptAs, why: reason, command: held.command }, "a ref of the sandbox's was not applied; it waits on the host");
        this.held.set(key, held);
        this.keptValues.set(key, action.to);
        return;
      }
    }
  }

  private async applyHead(git: HostGit, store: PairState, action: HeadAction, notes: string[]): Promise<void> {
    if (action.note !== null) notes.push(action.note);
    const target = { gitDir: action.admin, workTree: action.workTree };
    // As git's own checkout does: the index first, then HEAD.
    if (action.index !== null) {
      // The host staged nothing: its index becomes the new commit's tree (entries that did not change
      // keep their stat data), the work tree (the sandbox's files) stays.
      const moved = await git.run(target, ['read-tree', '--reset', action.index.to]);
      if (moved.exitCode !== 0) {
        notes.push(`the host's index in ${action.workTree} was left as it was: ${gitComplaint(moved)}`);
        return;
      }
    }
    if (action.head !== null) {
      const head = action.head;
      const result =
        head.kind === 'branch'
          ? await git.run(target, ['symbolic-ref', '-m', MESSAGE, 'HEAD', head.ref])
          : await git.run(target, ['update-ref', '--no-deref', '-m', MESSAGE, 'HEAD', head.oid, ...(action.from?.kind === 'detached' ? [action.from.oid] : [])]);
      if (result.exitCode !== 0) {
        notes.push(`the host's HEAD in ${action.workTree} could not follow the sandbox's: ${gitComplaint(result)}`);
        return;
      }
      this.deps.logger.info({ module: 'gitsync', repository: store.host, workTree: action.workTree, head: head.kind === 'branch' ? head.ref : head.oid }, "the host's HEAD follows the sandbox's");
    }
  }

  private event(text: string): void {
    if (!this.events.includes(text)) this.events = [...this.events, text].slice(-32);
  }

  /** Watches the directories of the sandbox's git dir where refs and HEAD change. */
  private async rewatch(limit = MAX_WATCHES): Promise<void> {
    if (this.closed) return;
    const wanted = new Set<string>();
    // Sibling directories are looked at at once (the walk is as long as the deepest ref path), and
    // counted before they are: a container's million directories cost no more looks than the bound.
    let counted = 0;
    const count = (more: number): void => {
      counted += more;
      if (counted > limit) throw new SyncBound(`the sandbox's git dir has more than ${String(limit)} directories of refs to watch`);
    };
    const walk = async (sub: string): Promise<void> => {
      if ((await lstatOrNull(sub).catch(() => null))?.isDirectory() !== true) return;
      wanted.add(sub);
      const dirs = (await listDir(sub)).filter((child) => child.isDirectory());
      count(dirs.length);
      await Promise.all(dirs.map((child) => walk(path.join(sub, child.name))));
    };
    await Promise.all(
      this.state.pairs.map(async (pair) => {
        const dir = sandboxPath(this.state.root, pair);
        wanted.add(dir);
        count(1);
        if (pair.kind === 'worktree') return;
        wanted.add(path.join(dir, 'refs'));
        count(3);
        await Promise.all([walk(path.join(dir, 'refs', 'heads')), walk(path.join(dir, 'refs', 'tags'))]);
      }),
    );
    for (const [dir, watcher] of this.watchers) {
      if (wanted.has(dir)) continue;
      watcher.close();
      this.watchers.delete(dir);
    }
    for (const dir of wanted) {
      if (this.watchers.has(dir)) continue;
      const watcher = this.deps.watch(dir, () => {
        if (!this.ahead) this.trigger();
      });
      if (watcher === null) {
        if ((await lstatOrNull(dir).catch(() => null)) === null) continue;
        throw new SyncBound(`the system is out of file watches (fs.inotify.max_user_watches) for ${dir}`);
      }
      this.watchers.set(dir, watcher);
    }
    this.watchedPairs = this.state.pairs.length;
  }

  private unwatch(): void {
    this.ahead = false;
    for (const watcher of this.watchers.values()) watcher.close();
    this.watchers.clear();
    this.timer?.cancel();
    this.timer = null;
  }
}
