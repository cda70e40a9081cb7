import { promises as fs } from 'node:fs';
import path from 'node:path';
import { runSubprocess } from '../subprocess.js';
import { canonicalIfExists } from './mount-spec.js';
import type { GitRepo, LinkedWorktree, SubmoduleGitDir } from './git.js';
import { existingFiles, gitEnv, GIT_TIMEOUT_MS, TRUST_FOR_PROBE, type GitHostInput } from './git-host.js';

export async function repoAt(git: string, input: GitHostInput): Promise<GitRepo | null> {
  const result = await runSubprocess(git, [...TRUST_FOR_PROBE, 'rev-parse', '--path-format=absolute', '--git-dir', '--git-common-dir', '--show-toplevel'], {
    clientCwd: input.cwd,
    env: gitEnv(input),
    timeoutMs: GIT_TIMEOUT_MS,
  });
  if (result.exitCode !== 0) return null;
  const [gitDir, commonDir, topLevel] = result.stdout.split('\n');
  if (gitDir === undefined || commonDir === undefined || topLevel === undefined || topLevel === '') return null;
  const [realGitDir, realCommonDir, realTop] = await Promise.all([fs.realpath(gitDir), fs.realpath(commonDir), fs.realpath(topLevel)]);
  const [dotGit, commonEntries, names] = await Promise.all([
    fs.lstat(path.join(realTop, '.git')).catch(() => null),
    fs.readdir(realCommonDir).catch(() => []),
    fs.readdir(path.join(realCommonDir, 'worktrees')).catch(() => []),
  ]);
  const [worktrees, submodules] = await Promise.all([
    Promise.all(names.map((name) => linkedWorktree(path.join(realCommonDir, 'worktrees', name)))),
    submoduleGitDirs(realCommonDir),
  ]);
  const worktreeConfigs = await existingFiles(
    [realCommonDir, realGitDir, ...worktrees.map((worktree) => worktree.admin)].map((dir) => path.join(dir, 'config.worktree')),
  );
  return {
    topLevel: realTop,
    gitDir: realGitDir,
    commonDir: realCommonDir,
    linked: dotGit?.isFile() === true,
    commonEntries,
    worktrees,
    worktreeConfigs: [...new Set(worktreeConfigs.map((file) => file.source))],
    submodules,
  };
}

/** `core.worktree` of a submodule's git dir (git writes it relative to that dir), canonical. */
async function submoduleWorkTree(gitDir: string): Promise<string | null> {
  const config = await fs.readFile(path.join(gitDir, 'config'), 'utf8').catch(() => '');
  let inCore = false;
  for (const line of config.split('\n')) {
    const section = /^\s*\[\s*([A-Za-z0-9.-]+)/.exec(line);
    if (section !== null) inCore = section[1]?.toLowerCase() === 'core';
    const value = inCore ? /^\s*worktree\s*=\s*(.*?)\s*$/i.exec(line)?.[1] : undefined;
    if (value !== undefined && value !== '') return canonicalIfExists(path.resolve(gitDir, value.replace(/^"(.*)"$/, '$1')));
  }
  return null;
}

/** Bounds on the walk below: a repository with more is not a shape worth a slower acquire. */
const MAX_SUBMODULE_DIRS = 256;
const MAX_SUBMODULE_DEPTH = 8;

/**
 * `<common dir>/modules/<name>` holds each submodule's git dir (a name may contain slashes), and a
 * submodule's own submodules sit in its `modules/`. A directory with a HEAD file is a git dir.
 */
async function submoduleGitDirs(commonDir: string): Promise<SubmoduleGitDir[]> {
  const found: SubmoduleGitDir[] = [];
  let pending: { dir: string; depth: number }[] = [{ dir: path.join(commonDir, 'modules'), depth: 0 }];
  let visited = 0;
  while (pending.length > 0 && visited < MAX_SUBMODULE_DIRS) {
    const batch = pending.slice(0, MAX_SUBMODULE_DIRS - visited);
    visited += batch.length;
    pending = [];
    const listed = await Promise.all(batch.map(async ({ dir, depth }) => ({ depth, entries: await fs.readdir(dir, { withFileTypes: true }).catch(() => []), dir })));
    for (const { dir, depth, entries } of listed) {
      const names = new Set(entries.map((entry) => entry.name));
      const gitDir = names.has('HEAD') && names.has('objects');
      if (gitDir) found.push({ dir, hooks: names.has('hooks'), config: names.has('config'), workTree: names.has('config') ? await submoduleWorkTree(dir) : null });
      if (depth >= MAX_SUBMODULE_DEPTH) continue;
      for (const entry of entries) {
        // In a git dir only its own submodules are walked, not its objects and refs.
        if (entry.isDirectory() && (!gitDir || entry.name === 'modules')) pending.push({ dir: path.join(dir, entry.name), depth: depth + 1 });
      }
    }
  }
  return found;
}

/** `<admin>/gitdir` names the worktree's `.git` file; git prunes the admin dir when that is gone. */
async function linkedWorktree(admin: string): Promise<LinkedWorktree> {
  const named = (await fs.readFile(path.join(admin, 'gitdir'), 'utf8').catch(() => '')).trim();
  const exists = named.startsWith('/') && (await fs.stat(named).catch(() => null))?.isFile() === true;
  return { admin, dotGit: exists ? named : null };
}
