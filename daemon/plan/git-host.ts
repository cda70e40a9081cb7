import { promises as fs } from 'node:fs';
import path from 'node:path';
import { FingerprintCache } from '../fingerprint-cache.js';
import type { Defer } from '../quiet-time.js';
import { runSubprocess } from '../subprocess.js';
import { findExecutable } from '../executables.js';
import { entriesByFile, parseConfigList, type ConfigEntry } from './git-config.js';
import { sandboxOverrides, type Overrides, type XdgDefault } from './git-overrides.js';
import { includedFile, repositoryHomePaths } from './git-translate.js';
import { readUserConfig, type NamedFileMount, type TranslatedConfig } from './git-user-config.js';
import { canonicalIfExists } from './mount-spec.js';
import { containerKnownHostsPath, HOME_GIT_FILES, sandboxPath, type GitConfigFile, type GitRepo, type LinkedWorktree, type SubmoduleGitDir } from './git.js';

const GIT_TIMEOUT_MS = 5_000;

export interface GitHostInput {
  hostHome: string;
  cwd: string;
  /** The session's PATH, where git is looked up. */
  path: string;
  xdgConfigHome: string | undefined;
}

export interface GitHostFacts {
  /** The user's global config files, translated for the sandbox (top-level ones first, XDG then ~/.gitconfig). */
  configs: TranslatedConfig[];
  /** The files they name, mounted as they are (excludes, attributes, templates, the signing key's public half…). */
  files: NamedFileMount[];
  /** Without a git that answers: the usual files of HOME, mounted as they are (dual HOME). */
  plainHomeFiles: GitConfigFile[];
  /** Every path the config part of this answer was read from or looked for. */
  configWatched: string[];
  /** null when git could not be asked: no generated config then, only the plain files. */
  overrides: Overrides | null;
  knownHosts: GitConfigFile[];
  repo: GitRepo | null;
  warnings: string[];
}

/**
 * The probes only read the repository's layout and config (nothing they run executes what a
 * config names), so they may look at a repository owned by another uid, which git itself would
 * refuse; the sandbox then gets a safe.directory for exactly that repository.
 */
const TRUST_FOR_PROBE = ['-c', 'safe.directory=*'];

const KNOWN_HOSTS_FILES = ['.ssh/known_hosts', '.ssh/known_hosts2'] as const;

async function canonicalFile(file: string): Promise<GitConfigFile | null> {
  const source = await canonicalIfExists(file);
  const stat = source === null ? null : await fs.stat(source).catch(() => null);
  return source !== null && stat?.isFile() === true ? { path: file, source } : null;
}

function gitEnv(input: GitHostInput): Record<string, string> {
  return {
    HOME: input.hostHome,
    PATH: input.path,
    GIT_CONFIG_NOSYSTEM: '1',
    ...(input.xdgConfigHome === undefined ? {} : { XDG_CONFIG_HOME: input.xdgConfigHome }),
  };
}

async function repoAt(git: string, input: GitHostInput): Promise<GitRepo | null> {
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

async function existingFiles(files: readonly string[]): Promise<GitConfigFile[]> {
  return (await Promise.all(files.map(canonicalFile))).filter((file) => file !== null);
}

/** Without a git that answers, the usual files are mounted as they are and nothing is overridden. */
async function plainFiles(input: GitHostInput, why: string, knownHosts: GitConfigFile[]): Promise<GitHostFacts> {
  const homeFiles = HOME_GIT_FILES.map((name) => path.join(input.hostHome, name));
  return {
    configs: [],
    files: [],
    plainHomeFiles: await existingFiles(homeFiles),
    configWatched: homeFiles,
    overrides: null,
    knownHosts,
    repo: null,
    warnings: [`${why}; mounted ${HOME_GIT_FILES.map((name) => `~/${name}`).join(', ')} where present, with no sandbox overrides and no repository`],
  };
}

/** `$XDG_CONFIG_HOME` as git reads it: unset or empty means `~/.config`. */
function xdgConfigHome(input: GitHostInput): string {
  return input.xdgConfigHome === undefined || input.xdgConfigHome === '' ? path.join(input.hostHome, '.config') : input.xdgConfigHome;
}

/**
 * Asks the session's own git (DESIGN §8) what the global config sets (the host's effective
 * values decide the sandbox overrides), reads each global config file with it to translate, and
 * which repository the workdir is in. A git that is missing or fails (macOS's `xcode-select` shim
 * without the Command Line Tools) falls back to the usual files and says so.
 */
export async function gitHostFacts(input: GitHostInput): Promise<GitHostFacts> {
  const xdg = xdgConfigHome(input);
  const [git, knownHosts] = await Promise.all([
    findExecutable('git', input.path),
    existingFiles(KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name))),
  ]);
  if (git === null) return plainFiles(input, "git is not on the session's PATH", knownHosts);
  const toSandbox = (file: string): string => sandboxPath(file, input.hostHome);
  const [listed, repo] = await Promise.all([
    runSubprocess(git, [...TRUST_FOR_PROBE, 'config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], {
      clientCwd: input.cwd,
      env: gitEnv(input),
      timeoutMs: GIT_TIMEOUT_MS,
    }),
    repoAt(git, input),
  ]);
  if (listed.exitCode !== 0) {
    const detail = (listed.stderr.split('\n')[0] ?? '').slice(0, 200);
    return plainFiles(input, `the session's git (${git}) failed${detail === '' ? '' : `: ${detail}`}`, knownHosts);
  }
  const entries = parseConfigList(listed.stdout);
  const global: ConfigEntry[] = entries.filter((entry) => entry.scope === 'global');
  // The files the listing read need no other git; only includes whose condition does not hold here do.
  const userPending = readUserConfig({
    listed: entriesByFile(global, (entry) => includedFile(entry, input.hostHome)),
    git,
    env: gitEnv(input),
    hostHome: input.hostHome,
    xdgConfigHome: xdg,
    sandboxPath: toSandbox,
    run: runSubprocess,
  });
  userPending.catch(() => undefined);
  const defaults: XdgDefault[] = [
    { key: 'core.excludesfile', file: path.join(xdg, 'git', 'ignore') },
    { key: 'core.attributesfile', file: path.join(xdg, 'git', 'attributes') },
  ];
  const present = await Promise.all(defaults.map(async (entry) => ((await canonicalFile(entry.file)) === null ? null : entry)));
  const overrides = await sandboxOverrides({
    entries: global,
    hostHome: input.hostHome,
    knownHosts: knownHosts.map((file) => containerKnownHostsPath(file.path)),
    sandboxPath: toSandbox,
    publicKeyExists: async (file) => (await canonicalFile(file)) !== null,
    xdgDefaults: present.filter((entry) => entry !== null),
  });
  const user = await userPending;
  const overrideFiles = await Promise.all(
    overrides.files.map(async ({ key, file }) => ({ source: (await canonicalFile(file))?.source ?? file, target: toSandbox(file), purpose: `git ${key} file` })),
  );
  return {
    configs: user.configs,
    files: [...user.files, ...overrideFiles],
    plainHomeFiles: [],
    configWatched: [...user.watched, ...defaults.map((entry) => entry.file)],
    overrides,
    knownHosts,
    repo,
    warnings: [...user.warnings, ...repositoryHomePaths(entries)],
  };
}

/** Spawning git twice per acquire would dominate a warm acquire; see FingerprintCache. */
export const GIT_FACTS_TTL_MS = 10_000;

/**
 * What invalidates git facts: the config files git reported and the ones it would read if they
 * appeared, and the repository's layout (a new worktree, hooks/ or packed-refs changes the common
 * dir's mtime).
 */
export function gitFactsWatched(input: GitHostInput, facts: GitHostFacts): string[] {
  const repo = facts.repo;
  // Each name once: a plain clone's `.git` is its git dir and common dir, and every name is a
  // stat on every warm acquire.
  const files = [
    ...facts.configWatched,
    ...KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name)),
    ...(repo === null
      ? [input.cwd]
      : [path.join(repo.topLevel, '.git'), repo.gitDir, repo.commonDir, path.join(repo.commonDir, 'worktrees'), path.join(repo.commonDir, 'modules')]),
  ];
  return [...new Set(files)];
}

export function createGitFactsCache(now: () => number, defer?: Defer): FingerprintCache<GitHostInput, GitHostFacts> {
  return new FingerprintCache({
    compute: gitHostFacts,
    key: (input) => JSON.stringify([input.hostHome, input.cwd, input.path, input.xdgConfigHome ?? null]),
    watched: gitFactsWatched,
    now,
    ttlMs: GIT_FACTS_TTL_MS,
    ...(defer === undefined ? {} : { defer }),
  });
}
