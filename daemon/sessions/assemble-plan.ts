/*
 * The acquire's answer put together from its facts: no I/O here, so what goes where (the flags'
 * order, the warnings' order, which variable wins) is tested with plain objects.
 */
import path from 'node:path';
import type { AcquireInput, AcquireResponse, SessionGit } from '../../shared/contracts/sessions.js';
import type { Mount, Plan } from '../../shared/contracts/plan.js';
import { containerEnv } from '../plan/extras.js';
import { dedupeMounts, flattenArgs } from '../plan/flatten.js';
import type { GitSection } from '../plan/git/git-section.js';
import { repoNotes, type RepoPolicy } from '../plan/git/git.js';
import { hardenFlags } from '../plan/harden.js';
import type { UserMapping } from '../plan/user-namespace.js';
import { expressibleMounts } from '../plan/mount-args.js';
import { workdirMount } from '../plan/workdir.js';
import type { AcquireFacts, PreparedContainer } from './acquire-facts.js';

type PlanFacts = Omit<AcquireFacts, 'container' | 'site' | 'startTime' | 'held'>;

export function repoPolicy(input: AcquireInput): RepoPolicy {
  return { hooks: input.gitHooks, config: input.gitConfig };
}

/** The work tree's mount, when the plan makes it. */
export function workdirMounts(input: AcquireInput, facts: PlanFacts, hostHome: string): Mount[] {
  return input.workdir ? [workdirMount({ cwd: facts.cwd, repoTop: facts.git.repo?.topLevel ?? null, hostHome, allowWide: input.allowWideWorkdir, relabel: facts.relabel })] : [];
}

/**
 * What the sandbox can write: the workdir and `--mount …:rw`. A caller that mounts the work tree
 * itself (no workdir in the plan) is taken to mount it at its own path, unless that would be as
 * wide as the home directory (which a plan's own workdir refuses, and nothing could protect).
 */
export function writableSources(input: AcquireInput, facts: PlanFacts, hostHome: string): Pick<Mount, 'source' | 'target'>[] {
  const requested = facts.requested.filter((mount) => !mount.readOnly);
  const workdir = workdirMounts(input, facts, hostHome)[0];
  if (workdir !== undefined) return [workdir, ...requested];
  const tree = facts.git.repo?.topLevel ?? facts.cwd;
  const toHome = path.relative(tree, hostHome);
  const wide = tree === '/' || toHome === '' || (!toHome.startsWith('..') && !path.isAbsolute(toHome));
  return wide ? requested : [{ source: tree, target: tree }, ...requested];
}

/**
 * Every mount the session asks for that `run` can express, before the site keeps what it sees. What
 * protects a path the host's git reads comes before the requested mounts: a mount on the same target
 * never takes its place.
 */
export function sessionMounts(input: AcquireInput, facts: PlanFacts, git: GitSection, protection: readonly Mount[], hostHome: string): { mounts: Mount[]; warnings: string[] } {
  const workdir = workdirMounts(input, facts, hostHome);
  return expressibleMounts(dedupeMounts([...facts.ssh.mounts, ...workdir, ...git.mounts, ...protection, ...facts.requested, ...facts.cloud.mounts]));
}

export interface PlanParts {
  sessionId: string;
  input: AcquireInput;
  facts: PlanFacts;
  git: GitSection;
  /** The site's engine arguments and the mounts it sees, with every mount warning in order. */
  site: { globalArgs: string[]; mounts: Mount[]; warnings: string[] };
  /** How the sandbox's git work comes home (null outside a repository). */
  gitStatus: SessionGit | null;
  /** Who the container user is on the host (user-namespace.ts). */
  users: UserMapping;
  container: PreparedContainer;
  /** Wall-clock ms. */
  now: number;
  leaseTtlMs: number;
}

/** The session, its plan and the lease terms, as the route answers them. */
export function assemblePlan(parts: PlanParts): AcquireResponse {
  const { input, facts, git } = parts;
  const ssh = facts.ssh;
  const planEnv = { ...git.env, ...ssh.env, ...facts.cloud.env };
  // What the client passes never overrides a variable the plan sets.
  const passed = containerEnv(input.client.env ?? {}, input.passEnv, new Set(Object.keys(planEnv)));
  const repo = facts.git.repo === null ? { warnings: [], notices: [] } : repoNotes(facts.git.repo, repoPolicy(input));
  const body: Omit<Plan, 'args'> = {
    mounts: parts.site.mounts,
    env: { ...planEnv, ...passed.env },
    spawnEnv: passed.spawnEnv,
    globalArgs: parts.site.globalArgs,
    flags: [...ssh.flags, ...(input.workdir ? ['--workdir', facts.cwd] : []), ...parts.users.flags, ...parts.container.flags, ...(input.harden ? hardenFlags() : [])],
    warnings: [
      ...ssh.warnings,
      ...git.warnings,
      ...repo.warnings,
      ...parts.site.warnings,
      ...parts.users.warnings,
      ...passed.warnings,
    ],
    notices: [...parts.users.notices, ...git.notices, ...repo.notices, ...ssh.notices],
  };
  const now = new Date(parts.now).toISOString();
  return {
    session: {
      id: parts.sessionId,
      engine: input.engine,
      label: input.label ?? null,
      clientPid: input.client.pid,
      createdAt: now,
      lastHeartbeatAt: now,
      ssh: ssh.ssh,
      container: parts.container.container,
      refused: 0,
      git: parts.gitStatus,
      gitCredentials: ssh.gitCredentials?.status === 'served' ? ssh.gitCredentials.hosts : [],
    },
    plan: { ...body, args: flattenArgs(body) },
    leaseTtlMs: parts.leaseTtlMs,
    // A third of the lease: two heartbeats can be lost before it lapses.
    heartbeatIntervalMs: Math.max(1000, Math.floor(parts.leaseTtlMs / 3)),
    sockets: ssh.sockets,
    gitCredentials: ssh.gitCredentials,
  };
}
