import { STASH_REF, type Head } from './sandbox-refs.js';

/**
 * What one sync does with the sandbox's refs of one git dir, decided from facts the caller reads
 * (the host's refs, its worktrees, ancestry) and nothing else: which host refs move (always by
 * compare-and-swap, never deleting), where each served worktree's HEAD goes, and what stays under
 * `refs/sandboxd/` with the reason.
 */

/** A ref the sandbox changed since its copy was made. */
export interface RefChange {
  name: string;
  /** What the sandbox's copy started with (null: the sandbox made it). */
  base: string | null;
  sandbox: string;
}

/** A host worktree whose work tree a session mounts: the sandbox changed its files. */
export interface ServedWorktree {
  /** The host git dir holding its HEAD and index (the common dir, `worktrees/<name>`, or a submodule's). */
  admin: string;
  workTree: string;
  /** Its HEAD in the sandbox (null: unreadable, or not something git writes). */
  sandboxHead: Head | null;
}

/** A host worktree as `git worktree list` shows it. */
export interface HostWorktree {
  admin: string;
  workTree: string;
  head: Head | null;
}

export interface SyncQueries {
  /** The host's value of a ref now (before this sync moves anything). */
  hostValue(name: string): string | null;
  /** The sandbox's value of a ref (changed or not). */
  sandboxValue(name: string): string | null;
  /** Whether the objects of `oid` reached the host's store (fetched and checked). */
  fetched(oid: string): boolean;
  isAncestor(ancestor: string, descendant: string): Promise<boolean>;
  /** Whether the host's index of a worktree differs from `commit`'s tree (the user staged something). */
  stagedOnHost(admin: string, commit: string): Promise<boolean>;
  /** Paths that are gitlinks in `to` and were not in `from` (null: nothing to compare with). */
  addedGitlinks(from: string | null, to: string): Promise<string[]>;
  /** Whether `path` in `workTree` holds a `.git` (or is not plainly reachable without following a link). */
  holdsRepository(workTree: string, path: string): Promise<boolean>;
}

export interface SyncPlanInput {
  changes: readonly RefChange[];
  served: readonly ServedWorktree[];
  worktrees: readonly HostWorktree[];
  /** No session on the repository is left: what waits for the end is decided now. */
  final: boolean;
  queries: SyncQueries;
}

export type HoldReason =
  | { kind: 'diverged' }
  | { kind: 'deleted' }
  | { kind: 'exists' }
  | { kind: 'moved' }
  | { kind: 'checked-out'; workTree: string }
  | { kind: 'staged'; workTree: string }
  | { kind: 'gitlink'; path: string; workTree: string };

export type RefAction =
  /** `rewrites`: not a fast-forward (a rebase, a reset), applied because the host's is still where the sandbox's copy started. */
  | { kind: 'update'; ref: string; from: string | null; to: string; rewrites?: true }
  | { kind: 'hold'; ref: string; to: string; reason: HoldReason }
  | { kind: 'unfetched'; ref: string; to: string }
  | { kind: 'defer'; ref: string };

export interface HeadAction {
  admin: string;
  workTree: string;
  /** null: HEAD stays; else what it becomes. */
  head: Head | null;
  /** The host's HEAD before (for the detached compare-and-swap). */
  from: Head | null;
  /** The index moves from this commit's tree to that one's (only when the host staged nothing). */
  index: { from: string; to: string } | null;
  /** Said to the user: why HEAD or the index was left. */
  note: string | null;
}

export interface SyncPlan {
  refs: RefAction[];
  heads: HeadAction[];
}

function isBranch(name: string): boolean {
  return name.startsWith('refs/heads/');
}

function headCommit(head: Head | null, value: (name: string) => string | null): string | null {
  if (head === null) return null;
  return head.kind === 'detached' ? head.oid : value(head.ref);
}

function sameHead(a: Head | null, b: Head | null): boolean {
  if (a === null || b === null) return a === b;
  return a.kind === 'branch' ? b.kind === 'branch' && a.ref === b.ref : b.kind === 'detached' && a.oid === b.oid;
}

function branchName(ref: string): string {
  return ref.replace(/^refs\/heads\//, '');
}

/** Whether a move from `from` to `to` adds a gitlink a served work tree could hold a planted repository at. */
async function gitlinkHold(from: string | null, to: string, input: SyncPlanInput): Promise<HoldReason | 'defer' | null> {
  const added = await input.queries.addedGitlinks(from, to);
  if (added.length === 0) return null;
  // While a session runs, its sandbox could still plant a repository at the new path.
  if (!input.final) return 'defer';
  for (const served of input.served) {
    for (const path of added) if (await input.queries.holdsRepository(served.workTree, path)) return { kind: 'gitlink', path, workTree: served.workTree };
  }
  return null;
}

/** The host's HEAD of the main worktree: what a branch the sandbox made is compared with for gitlinks. */
function mainCommit(input: SyncPlanInput): string | null {
  const main = input.worktrees[0] ?? null;
  return main === null ? null : headCommit(main.head, (name) => input.queries.hostValue(name));
}

async function refAction(change: RefChange, input: SyncPlanInput): Promise<RefAction | null> {
  const { queries } = input;
  const { name, base, sandbox } = change;
  const host = queries.hostValue(name);
  if (host === sandbox) return null;
  if (!queries.fetched(sandbox)) return { kind: 'unfetched', ref: name, to: sandbox };
  const hold = (reason: HoldReason): RefAction => ({ kind: 'hold', ref: name, to: sandbox, reason });
  let rewrites = false;
  if (isBranch(name)) {
    if (host === null && base !== null) return hold({ kind: 'deleted' });
    if (host !== null && !(await queries.isAncestor(host, sandbox))) {
      // Compare-and-swap: the host's is where the sandbox's copy started, so the sandbox rewrote
      // its own history (a rebase, a reset); the old tip stays in the host's reflog.
      if (host === base) rewrites = true;
      // The host went on from the sandbox's value: nothing of the sandbox's is new.
      else if (await queries.isAncestor(sandbox, host)) return null;
      else return hold({ kind: 'diverged' });
    }
  } else if (name === STASH_REF) {
    if (host !== base) return hold({ kind: 'moved' });
  } else if (host !== null) {
    return hold({ kind: 'exists' });
  }
  const gitlink = await gitlinkHold(host ?? mainCommit(input), sandbox, input);
  if (gitlink === 'defer') return { kind: 'defer', ref: name };
  if (gitlink !== null) return hold(gitlink);
  for (const worktree of input.worktrees) {
    if (worktree.head?.kind !== 'branch' || worktree.head.ref !== name) continue;
    // Checked out where no sandbox worked: its files are the old ones.
    if (!input.served.some((served) => served.admin === worktree.admin)) return hold({ kind: 'checked-out', workTree: worktree.workTree });
    if (host !== null && (await queries.stagedOnHost(worktree.admin, host))) return hold({ kind: 'staged', workTree: worktree.workTree });
  }
  return { kind: 'update', ref: name, from: host, to: sandbox, ...(rewrites ? { rewrites: true as const } : {}) };
}

/** Where a served worktree's HEAD goes once the refs moved; `value` reads refs after this sync's updates. */
async function headAction(served: ServedWorktree, input: SyncPlanInput, value: (name: string) => string | null): Promise<HeadAction | null> {
  const { queries } = input;
  const host = input.worktrees.find((worktree) => worktree.admin === served.admin);
  if (host === undefined || served.sandboxHead === null) return null;
  const target = served.sandboxHead;
  const leave = (note: string): HeadAction => ({ admin: served.admin, workTree: served.workTree, head: null, from: host.head, index: null, note });
  let to: string | null;
  if (target.kind === 'branch') {
    to = queries.sandboxValue(target.ref);
    // The work tree holds the sandbox's branch: the host's must be that commit.
    if (to === null || value(target.ref) !== to) return sameHead(target, host.head) ? null : leave(`the sandbox checked out ${branchName(target.ref)}, which is not the same on the host`);
    const elsewhere = input.worktrees.find((worktree) => worktree.admin !== served.admin && worktree.head?.kind === 'branch' && worktree.head.ref === target.ref);
    if (elsewhere !== undefined) return leave(`the sandbox checked out ${branchName(target.ref)}, which is checked out in ${elsewhere.workTree}`);
  } else {
    to = target.oid;
    if (!queries.fetched(to)) return leave(`the sandbox's HEAD ${to.slice(0, 12)} did not reach the host`);
  }
  const from = headCommit(host.head, (name) => queries.hostValue(name));
  const moves = !sameHead(target, host.head);
  if (from === to) return moves ? { admin: served.admin, workTree: served.workTree, head: target, from: host.head, index: null, note: null } : null;
  if (from === null) return leave('the host has no commit checked out there to move its index from');
  const gitlink = await gitlinkHold(from, to, input);
  if (gitlink === 'defer') return null;
  if (gitlink !== null && gitlink.kind === 'gitlink') return leave(`the sandbox's HEAD adds the submodule ${gitlink.path}, and ${gitlink.workTree} holds a repository there the host did not have`);
  if (await queries.stagedOnHost(served.admin, from)) return leave(`you staged changes in ${served.workTree}: its HEAD and index are left as they are`);
  return { admin: served.admin, workTree: served.workTree, head: moves ? target : null, from: host.head, index: { from, to }, note: null };
}

export async function planSync(input: SyncPlanInput): Promise<SyncPlan> {
  const refs: RefAction[] = [];
  for (const change of input.changes) {
    const action = await refAction(change, input);
    if (action !== null) refs.push(action);
  }
  const updated = new Map(refs.flatMap((action) => (action.kind === 'update' ? [[action.ref, action.to] as const] : [])));
  const value = (name: string): string | null => updated.get(name) ?? input.queries.hostValue(name);
  const heads: HeadAction[] = [];
  for (const served of input.served) {
    const action = await headAction(served, input, value);
    if (action !== null) heads.push(action);
  }
  return { refs, heads };
}
