import { promises as fs } from 'node:fs';
import path from 'node:path';
import { FingerprintCache } from '../fingerprint-cache.js';
import type { Defer } from '../quiet-time.js';
import { runSubprocess } from '../subprocess.js';
import { findExecutable } from '../executables.js';
import { globalConfigFiles, parseConfigList, type ConfigEntry } from './git-config.js';
import { sandboxOverrides, type Overrides } from './git-overrides.js';
import { canonicalIfExists } from './mount-spec.js';
import { containerKnownHostsPath, HOME_GIT_FILES, sandboxPath, type GitConfigFile, type GitRepo } from './git.js';
import { discoveryPath, readRepoLayout, withEffectiveHooksPath } from './git-repo.js';

export const GIT_TIMEOUT_MS = 5_000;

export interface GitHostInput {
  hostHome: string;
  cwd: string;
  /** The session's PATH, where git is looked up. */
  path: string;
  xdgConfigHome: string | undefined;
}

export interface GitHostFacts {
  configFiles: GitConfigFile[];
  /** The top-level global files (XDG, then ~/.gitconfig) the generated config includes. */
  includes: string[];
  /** null when git could not be asked: no generated config then, only the plain files. */
  overrides: Overrides | null;
  signingKey: GitConfigFile | null;
  knownHosts: GitConfigFile[];
  repo: GitRepo | null;
  warnings: string[];
}

/**
 * The probes only read the repository's layout and config (nothing they run executes what a
 * config names), so they may look at a repository owned by another uid, which git itself would
 * refuse; the sandbox then gets a safe.directory for exactly that repository.
 */
export const TRUST_FOR_PROBE = ['-c', 'safe.directory=*'];

const KNOWN_HOSTS_FILES = ['.ssh/known_hosts', '.ssh/known_hosts2'] as const;

async function canonicalFile(file: string): Promise<GitConfigFile | null> {
  const source = await canonicalIfExists(file);
  const stat = source === null ? null : await fs.stat(source).catch(() => null);
  return source !== null && stat?.isFile() === true ? { path: file, source } : null;
}

export function gitEnv(input: GitHostInput): Record<string, string> {
  return {
    HOME: input.hostHome,
    PATH: input.path,
    GIT_CONFIG_NOSYSTEM: '1',
    ...(input.xdgConfigHome === undefined ? {} : { XDG_CONFIG_HOME: input.xdgConfigHome }),
  };
}

export async function existingFiles(files: readonly string[]): Promise<GitConfigFile[]> {
  return (await Promise.all(files.map(canonicalFile))).filter((file) => file !== null);
}

/** Without a git that answers, the usual files are mounted as they are and nothing is overridden. */
async function plainFiles(input: GitHostInput, why: string, knownHosts: GitConfigFile[], repo: GitRepo | null): Promise<GitHostFacts> {
  return {
    configFiles: await existingFiles(HOME_GIT_FILES.map((name) => path.join(input.hostHome, name))),
    includes: [],
    overrides: null,
    signingKey: null,
    knownHosts,
    repo,
    warnings: [`${why}; mounted ${HOME_GIT_FILES.map((name) => `~/${name}`).join(', ')} where present, with no sandbox overrides`],
  };
}

/**
 * Asks the session's own git (DESIGN §8) which global config files it reads, what they set, and
 * which repository the workdir is in. A git that is missing or fails (macOS's `xcode-select` shim
 * without the Command Line Tools) falls back to the usual files and says so.
 */
export async function gitHostFacts(input: GitHostInput): Promise<GitHostFacts> {
  const xdgConfigHome = input.xdgConfigHome ?? path.join(input.hostHome, '.config');
  const [git, knownHosts] = await Promise.all([
    findExecutable('git', input.path),
    existingFiles(KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name))),
  ]);
  // The repository is read without git: a git that fails never drops its protection.
  const repoPending = readRepoLayout(input.cwd, input.hostHome);
  repoPending.catch(() => undefined);
  if (git === null) return plainFiles(input, "git is not on the session's PATH", knownHosts, await repoPending);
  const [listed, repo] = await Promise.all([
    runSubprocess(git, [...TRUST_FOR_PROBE, 'config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], {
      clientCwd: input.cwd,
      env: gitEnv(input),
      timeoutMs: GIT_TIMEOUT_MS,
    }),
    repoPending,
  ]);
  if (listed.exitCode !== 0) {
    const detail = (listed.stderr.split('\n')[0] ?? '').slice(0, 200);
    return plainFiles(input, `the session's git (${git}) failed${detail === '' ? '' : `: ${detail}`}`, knownHosts, repo);
  }
  const entries = parseConfigList(listed.stdout);
  const global: ConfigEntry[] = entries.filter((entry) => entry.scope === 'global');
  const { files } = globalConfigFiles(entries, input.hostHome, xdgConfigHome, input.cwd);
  const configFiles = await existingFiles(files);
  const overrides = await sandboxOverrides({
    entries: global,
    hostHome: input.hostHome,
    knownHosts: knownHosts.map((file) => containerKnownHostsPath(file.path)),
    sandboxPath: (file) => sandboxPath(file, input.hostHome),
    publicKeyExists: async (file) => (await canonicalFile(file)) !== null,
  });
  const topLevel = [path.join(xdgConfigHome, 'git', 'config'), path.join(input.hostHome, '.gitconfig')];
  return {
    configFiles,
    includes: topLevel.filter((file) => configFiles.some((config) => config.path === file)),
    overrides,
    signingKey: overrides.signingKey === null ? null : await canonicalFile(overrides.signingKey.path),
    knownHosts,
    repo: repo === null ? null : await withEffectiveHooksPath(repo, entries.findLast((entry) => entry.key === 'core.hookspath')?.value ?? null, input.hostHome),
    warnings: [],
  };
}

/** Spawning git twice per acquire would dominate a warm acquire; see FingerprintCache. */
export const GIT_FACTS_TTL_MS = 10_000;

/**
 * What invalidates git facts: the config files git reported and the ones it would read if they
 * appeared, and the repository's layout (the directories the layout reader walked and read: a
 * new `.git` on the way up, a new worktree or submodule, a changed config).
 */
export function gitFactsWatched(input: GitHostInput, facts: GitHostFacts): string[] {
  const xdg = input.xdgConfigHome ?? path.join(input.hostHome, '.config');
  const repo = facts.repo;
  // Each name once: a plain clone's `.git` is its git dir and common dir, and every name is a
  // stat on every warm acquire.
  const files = [
    path.join(input.hostHome, '.gitconfig'),
    path.join(xdg, 'git', 'config'),
    ...facts.configFiles.map((file) => file.path),
    ...KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name)),
    ...(facts.signingKey === null ? [] : [facts.signingKey.path]),
    ...(repo === null ? discoveryPath(input.cwd) : repo.watched),
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
