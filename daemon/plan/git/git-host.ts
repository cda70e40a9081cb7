import { promises as fs } from 'node:fs';
import path from 'node:path';
import { FingerprintCache } from '../../cache/fingerprint-cache.js';
import type { Defer } from '../../cache/quiet-time.js';
import type { RunSubprocess } from '../../os/subprocess.js';
import { deniedByPrivacy } from '../../os/privacy.js';
import { SandboxdError } from '../../../shared/errors.js';
import { entriesByFile, parseConfigList, type ConfigEntry } from './git-config.js';
import { sandboxOverrides, type Overrides, type XdgDefault } from './git-overrides.js';
import { includedFile, repositoryHomePaths } from './git-translate.js';
import { readUserConfig, type NamedFileMount, type NamedPath, type TranslatedConfig } from './git-user-config.js';
import { canonicalIfExists } from '../mount-spec.js';
import { chooseGit, NODE_GIT_CHOICE, type GitChoice } from './developer-dir.js';
import type { Platform } from '../../../shared/paths.js';
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
  /** The user's global config files, translated for the sandbox (top-level ones first, XDG then ~/.gitconfig). */
  configs: TranslatedConfig[];
  /** The files they name, mounted as they are (excludes, attributes, templates, the signing key's public half…). */
  files: NamedFileMount[];
  /** Every path the user's global config makes the host's git read (present or not): protected where the sandbox writes. */
  namedPaths: NamedPath[];
  /** Without a git that answers: the usual files of HOME, mounted as they are (dual HOME). */
  plainHomeFiles: GitConfigFile[];
  /** Every path the config part of this answer was read from or looked for. */
  configWatched: string[];
  /** null when git could not be asked: no generated config then, only the plain files. */
  overrides: Overrides | null;
  knownHosts: GitConfigFile[];
  repo: GitRepo | null;
  /** The session's git, which brings the sandbox's commits home; null when none answers. */
  git: string | null;
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
async function plainFiles(input: GitHostInput, why: string, knownHosts: GitConfigFile[], repo: GitRepo | null, gitWatched: readonly string[]): Promise<GitHostFacts> {
  const homeFiles = HOME_GIT_FILES.map((name) => path.join(input.hostHome, name));
  return {
    configs: [],
    files: [],
    namedPaths: homeFiles.map((file) => ({ path: file, what: 'a git config file git reads from HOME', kind: 'file' as const })),
    plainHomeFiles: await existingFiles(homeFiles),
    configWatched: [...homeFiles, ...gitWatched],
    overrides: null,
    knownHosts,
    repo,
    git: null,
    warnings: [`${why}; mounted ${HOME_GIT_FILES.map((name) => `~/${name}`).join(', ')} where present, with no sandbox overrides`],
  };
}

/** `$XDG_CONFIG_HOME` as git reads it: unset or empty means `~/.config`. */
function xdgConfigHome(input: GitHostInput): string {
  return input.xdgConfigHome === undefined || input.xdgConfigHome === '' ? path.join(input.hostHome, '.config') : input.xdgConfigHome;
}

/** How git is found and run: the daemon's runner, and the session's git on its PATH. */
export interface GitEdges {
  chooseGit: (input: GitHostInput) => Promise<GitChoice>;
  run: RunSubprocess;
}

/**
 * Asks the session's own git (DESIGN §8) what the global config sets (the host's effective
 * values decide the sandbox overrides), reads each global config file with it to translate, and
 * which repository the workdir is in. A git that is missing or fails (macOS's `xcode-select` shim
 * without the Command Line Tools) falls back to the usual files and says so.
 */
export async function gitHostFacts(input: GitHostInput, edges: GitEdges): Promise<GitHostFacts> {
  const { chooseGit, run } = edges;
  const xdg = xdgConfigHome(input);
  const [choice, knownHosts] = await Promise.all([chooseGit(input), existingFiles(KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name)))]);
  const { git } = choice;
  // The repository is read without git: a git that fails never drops its protection.
  const repoPending = readRepoLayout(input.cwd, input.hostHome);
  repoPending.catch(() => undefined);
  if (git === null) return plainFiles(input, choice.why ?? 'no git to ask', knownHosts, await repoPending, choice.watched);
  const toSandbox = (file: string): string => sandboxPath(file, input.hostHome);
  const [listed, repo] = await Promise.all([
    run(git, [...TRUST_FOR_PROBE, 'config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], {
      clientCwd: input.cwd,
      env: gitEnv(input),
      timeoutMs: GIT_TIMEOUT_MS,
    }),
    repoPending,
  ]);
  if (listed.exitCode !== 0) {
    const detail = (listed.stderr.split('\n')[0] ?? '').slice(0, 200);
    // Not a git to do without: the workdir itself cannot be read, so neither can its repository.
    if (deniedByPrivacy(listed.stderr)) throw new SandboxdError('PRIVACY_DENIED', `the session's git cannot read ${input.cwd}: ${detail}`);
    return plainFiles(input, `the session's git (${git}) failed${detail === '' ? '' : `: ${detail}`}`, knownHosts, repo, choice.watched);
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
    run,
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
    namedPaths: [...user.paths, ...defaults.map((entry) => ({ path: entry.file, what: `${entry.key} (git's default)`, kind: 'file' as const }))],
    plainHomeFiles: [],
    configWatched: [...user.watched, ...defaults.map((entry) => entry.file), ...choice.watched],
    overrides,
    knownHosts,
    repo: repo === null ? null : await withEffectiveHooksPath(repo, entries.findLast((entry) => entry.key === 'core.hookspath')?.value ?? null, input.hostHome),
    git,
    warnings: [...user.warnings, ...repositoryHomePaths(entries)],
  };
}

/** The session's git, found on its PATH with its environment (on a Mac never the tools' install shim). */
export function sessionGit(platform: Platform, run: RunSubprocess): GitEdges {
  return { chooseGit: (input) => chooseGit(input.path, gitEnv(input), { platform, run, ...NODE_GIT_CHOICE }), run };
}

/** Spawning git twice per acquire would dominate a warm acquire; see FingerprintCache. */
export const GIT_FACTS_TTL_MS = 10_000;

/**
 * What invalidates git facts: the config files git reported and the ones it would read if they
 * appeared, and the repository's layout (the directories the layout reader walked and read: a
 * new `.git` on the way up, a new worktree or submodule, a changed config).
 */
export function gitFactsWatched(input: GitHostInput, facts: GitHostFacts): string[] {
  const repo = facts.repo;
  // Each name once: a plain clone's `.git` is its git dir and common dir, and every name is a
  // stat on every warm acquire.
  const files = [
    ...facts.configWatched,
    ...KNOWN_HOSTS_FILES.map((name) => path.join(input.hostHome, name)),
    ...(repo === null ? discoveryPath(input.cwd) : repo.watched),
  ];
  return [...new Set(files)];
}

export function createGitFactsCache(now: () => number, git: GitEdges, defer?: Defer, fingerprint?: (files: readonly string[]) => Promise<string>): FingerprintCache<GitHostInput, GitHostFacts> {
  return new FingerprintCache({
    compute: (input) => gitHostFacts(input, git),
    key: (input) => JSON.stringify([input.hostHome, input.cwd, input.path, input.xdgConfigHome ?? null]),
    watched: gitFactsWatched,
    now,
    ttlMs: GIT_FACTS_TTL_MS,
    defer,
    fingerprint,
  });
}
