import { promises as fs } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { FingerprintCache } from '../fingerprint-cache.js';
import { findExecutable } from '../podman/discover.js';
import { globalConfigFiles, parseConfigList } from './git-config.js';
import { canonicalIfExists } from './mount-spec.js';
import { HOME_GIT_FILES, type GitConfigFile, type GitRepo } from './git.js';

const GIT_TIMEOUT_MS = 5_000;

export interface GitHostInput {
  hostHome: string;
  cwd: string;
  /** The session's PATH, where git is looked up. */
  path: string;
  xdgConfigHome: string | undefined;
}

export interface GitHostFacts {
  configFiles: GitConfigFile[];
  repo: GitRepo | null;
  warnings: string[];
}

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
  const result = await execa(git, ['rev-parse', '--path-format=absolute', '--git-dir', '--git-common-dir', '--show-toplevel'], {
    cwd: input.cwd,
    env: gitEnv(input),
    extendEnv: false,
    reject: false,
    timeout: GIT_TIMEOUT_MS,
  });
  if (result.exitCode !== 0) return null;
  const [gitDir, commonDir, topLevel] = result.stdout.split('\n');
  if (gitDir === undefined || commonDir === undefined || topLevel === undefined || topLevel === '') return null;
  const [realGitDir, realCommonDir, realTop] = await Promise.all([fs.realpath(gitDir), fs.realpath(commonDir), fs.realpath(topLevel)]);
  const dotGit = await fs.lstat(path.join(realTop, '.git')).catch(() => null);
  const commonEntries = await fs.readdir(realCommonDir).catch(() => []);
  return { topLevel: realTop, gitDir: realGitDir, commonDir: realCommonDir, linked: dotGit?.isFile() === true, commonEntries };
}

/**
 * Asks the session's own git (DESIGN §8) which global config files it reads and which repository
 * the workdir is in. Without git, falls back to the usual files and says so.
 */
export async function gitHostFacts(input: GitHostInput): Promise<GitHostFacts> {
  const xdgConfigHome = input.xdgConfigHome ?? path.join(input.hostHome, '.config');
  const git = await findExecutable('git', input.path);
  if (git === null) {
    const files = await Promise.all(HOME_GIT_FILES.map((name) => canonicalFile(path.join(input.hostHome, name))));
    return {
      configFiles: files.filter((file) => file !== null),
      repo: null,
      warnings: [`git is not on the session's PATH; mounted ${HOME_GIT_FILES.map((name) => `~/${name}`).join(', ')} where present, and no repository`],
    };
  }
  const [listed, repo] = await Promise.all([
    execa(git, ['config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], {
      cwd: input.cwd,
      env: gitEnv(input),
      extendEnv: false,
      reject: false,
      timeout: GIT_TIMEOUT_MS,
    }),
    repoAt(git, input),
  ]);
  const { files } = globalConfigFiles(parseConfigList(listed.stdout), input.hostHome, xdgConfigHome, input.cwd);
  const configFiles = (await Promise.all(files.map(canonicalFile))).filter((file) => file !== null);
  return { configFiles, repo, warnings: [] };
}

/** Spawning git twice per acquire would dominate a warm acquire; see FingerprintCache. */
export const GIT_FACTS_TTL_MS = 10_000;

/**
 * What invalidates git facts: the config files git reported and the ones it would read if they
 * appeared, and the repository's layout (a new worktree, hooks/ or packed-refs changes the common
 * dir's mtime).
 */
export function gitFactsWatched(input: GitHostInput, facts: GitHostFacts): string[] {
  const xdg = input.xdgConfigHome ?? path.join(input.hostHome, '.config');
  const repo = facts.repo;
  return [
    path.join(input.hostHome, '.gitconfig'),
    path.join(xdg, 'git', 'config'),
    ...facts.configFiles.map((file) => file.path),
    ...(repo === null ? [input.cwd] : [path.join(repo.topLevel, '.git'), repo.gitDir, repo.commonDir]),
  ];
}

export function createGitFactsCache(now: () => number): FingerprintCache<GitHostInput, GitHostFacts> {
  return new FingerprintCache({
    compute: gitHostFacts,
    key: (input) => JSON.stringify([input.hostHome, input.cwd, input.path, input.xdgConfigHome ?? null]),
    watched: gitFactsWatched,
    now,
    ttlMs: GIT_FACTS_TTL_MS,
  });
}
