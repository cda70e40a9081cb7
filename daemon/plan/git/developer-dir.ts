import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Platform } from '../../../shared/paths.js';
import { findExecutable, isExecutableFile } from '../../os/executables.js';
import type { RunSubprocess } from '../../os/subprocess.js';

/**
 * macOS's `/usr/bin/git` is a shim: without the Command Line Tools it opens their install dialog
 * every time it runs. `xcode-select -p` asks the same question with no UI.
 */
export const SHIM_GIT = '/usr/bin/git';
export const XCODE_SELECT = '/usr/bin/xcode-select';
/** The selection itself (undocumented but stable): it changes with `xcode-select --switch`. */
export const SELECTION_LINK = '/var/db/xcode_select_link';
/** Where an install of the Command Line Tools lands. */
export const CLT_GIT = '/Library/Developer/CommandLineTools/usr/bin/git';
const XCODE_SELECT_TIMEOUT_MS = 5_000;

export const NO_DEVELOPER_TOOLS =
  "the Command Line Tools are not installed, so the session's git (/usr/bin/git) would open their install dialog; run `xcode-select --install`, or install git with Homebrew";

/** The session's git, or why there is none to ask; `watched` changes when the answer may. */
export interface GitChoice {
  git: string | null;
  why: string | null;
  watched: string[];
}

/** `xcode-select -p`'s directory: exit 0 and one absolute line, else none. */
export function parseDeveloperDir(exitCode: number | null, stdout: string): string | null {
  const line = stdout.trim();
  return exitCode === 0 && line !== '' && !line.includes('\n') && path.isAbsolute(line) ? line : null;
}

export interface GitChoiceDeps {
  platform: Platform;
  run: RunSubprocess;
  findGit(searchPath: string): Promise<string | null>;
  realpath(file: string): Promise<string | null>;
  isExecutable(file: string): Promise<boolean>;
}

export const NODE_GIT_CHOICE: Omit<GitChoiceDeps, 'platform' | 'run'> = {
  findGit: (searchPath) => findExecutable('git', searchPath),
  realpath: (file) => fs.realpath(file).catch(() => null),
  isExecutable: isExecutableFile,
};

/**
 * The git to ask for a session: the first on its PATH, except the Mac's shim, which is replaced by
 * the selected developer dir's own git, or by none (never spawned) when no tools are installed: a
 * selection can outlive its tools, so the dir counts only with its `usr/bin/git`.
 */
export async function chooseGit(searchPath: string, env: Record<string, string>, deps: GitChoiceDeps): Promise<GitChoice> {
  const found = await deps.findGit(searchPath);
  if (found === null) return { git: null, why: "git is not on the session's PATH", watched: [] };
  if (deps.platform !== 'darwin' || (await deps.realpath(found)) !== SHIM_GIT) return { git: found, why: null, watched: [] };
  const selected = await deps.run(XCODE_SELECT, ['-p'], { env, timeoutMs: XCODE_SELECT_TIMEOUT_MS });
  const dir = parseDeveloperDir(selected.exitCode, selected.stdout);
  const git = dir === null ? null : path.join(dir, 'usr', 'bin', 'git');
  const watched = [SELECTION_LINK, CLT_GIT, ...(git === null || git === CLT_GIT ? [] : [git])];
  if (git !== null && (await deps.isExecutable(git))) return { git, why: null, watched };
  return { git: null, why: NO_DEVELOPER_TOOLS, watched };
}
