import { promises as fs } from 'node:fs';
import path from 'node:path';
import { REPOSITORY_PURPOSE_PREFIX, type Mount } from '../../../shared/contracts/plan.js';
import { SandboxdError } from '../../../shared/errors.js';
import { lstatOrNull } from '../../os/untrusted-files.js';

/**
 * Paths the host's git reads that a writable mount of the plan reaches (DESIGN §8): the files and
 * directories the user's global config and the repository's config name (includes, hooks,
 * templates, excludes…), the repository's work tree and git dir. Each is held where the container
 * sees it: read-only (a file or directory mount over it) or as a mount point of its own, and every
 * directory between the writable mount's top and it becomes a mount point too, since a container
 * can rename a directory that holds a mount point and put another in its place. One that does not
 * exist yet, or is reached through a symbolic link the sandbox could repoint, refuses the session
 * (GIT_PATH_UNPROTECTED) unless the caller allows it.
 */
export interface GitPath {
  path: string;
  /** For the message: what names it (`include.path in ~/.gitconfig`). */
  what: string;
  /**
   * `file` / `dir`: read-only; `worktree`: a mount point of its own (the work tree stays writable);
   * `gitdir`: the sandbox's git dir is mounted there (at its own path only).
   */
  kind: 'file' | 'dir' | 'worktree' | 'gitdir';
}

export interface ProtectInput {
  paths: readonly GitPath[];
  /** The plan's writable mounts (the workdir, `--mount …:rw`), and the work tree a caller mounts itself. */
  writable: readonly Pick<Mount, 'source' | 'target'>[];
  /** The caller accepts paths that cannot be protected (warned, not refused). */
  allowUnprotected: boolean;
  relabel: Mount['relabel'];
  /**
   * What the resolutions are kept with: the git facts they came from (cached while the config files
   * are unchanged), so a warm acquire does not look at every path again.
   */
  memoKey: object;
}

interface Resolved {
  canonical: string;
  links: string[];
}

const resolutions = new WeakMap<object, Map<string, Promise<Resolved>>>();

export const ALLOW_UNPROTECTED = '--allow-unprotected-git-paths (library: allowUnprotectedGitPaths)';

function inside(file: string, dir: string): boolean {
  return file === dir || file.startsWith(`${dir}/`);
}

function unprotected(what: string, file: string, why: string, remedy: string): SandboxdError {
  return new SandboxdError('GIT_PATH_UNPROTECTED', `${file} (${what}) ${why}: the sandbox could make what your host's git reads there`, {
    remedy: `${remedy}, or pass ${ALLOW_UNPROTECTED} to run anyway.`,
  });
}

/**
 * A path as the host's git reaches it: its canonical form (symbolic links followed as far as it
 * exists, the rest as named) and where the links on the way are (a link the sandbox can write, it
 * can repoint).
 */
async function resolve(file: string): Promise<Resolved> {
  const parts = path.resolve(file).split('/').filter((part) => part !== '');
  const links: string[] = [];
  let dir = '/';
  for (const [index, part] of parts.entries()) {
    const next = path.join(dir, part);
    const stat = await lstatOrNull(next).catch(() => null);
    if (stat === null) return { canonical: path.join(next, ...parts.slice(index + 1)), links };
    if (stat.isSymbolicLink()) {
      links.push(next);
      const real = await fs.realpath(next).catch(() => null);
      if (real === null) return { canonical: path.join(next, ...parts.slice(index + 1)), links };
      dir = real;
    } else {
      dir = next;
    }
  }
  return { canonical: dir, links };
}

export async function protectGitPaths(input: ProtectInput): Promise<{ mounts: Mount[]; warnings: string[] }> {
  const mounts: Mount[] = [];
  const warnings: string[] = [];
  const mount = (source: string, target: string, readOnly: boolean, purpose: string): void => {
    if (!mounts.some((known) => known.target === target)) mounts.push({ source, target, readOnly, purpose: `${REPOSITORY_PURPOSE_PREFIX}${purpose}`, relabel: input.relabel });
  };
  // Every path that cannot be protected is named at once: one refusal, not one per attempt.
  const refusals: SandboxdError[] = [];
  const refuse = (error: SandboxdError): void => {
    if (!input.allowUnprotected) refusals.push(error);
    else warnings.push(`git: ${error.message} (allowed by ${ALLOW_UNPROTECTED})`);
  };
  let memo = resolutions.get(input.memoKey);
  if (memo === undefined) {
    memo = new Map();
    resolutions.set(input.memoKey, memo);
  }
  for (const named of input.paths) {
    let resolving = memo.get(named.path);
    if (resolving === undefined) {
      resolving = resolve(named.path);
      memo.set(named.path, resolving);
    }
    const { canonical, links } = await resolving;
    const entry = { ...named, path: canonical };
    for (const writable of input.writable) {
      const link = links.find((at) => inside(at, writable.source) && at !== writable.source);
      if (link !== undefined) {
        refuse(unprotected(named.what, named.path, `is reached through the symbolic link ${link} inside the writable mount ${writable.source}`, 'Name the path without the link in your git config'));
        continue;
      }
      if (!inside(entry.path, writable.source)) continue;
      const translate = (file: string): string => path.join(writable.target, path.relative(writable.source, file));
      if ((entry.kind === 'worktree' || entry.kind === 'gitdir') && writable.target !== writable.source) {
        throw new SandboxdError('INVALID_MOUNT', `the writable mount of ${writable.source} at ${writable.target} makes ${entry.path} (${entry.what}) writable at another path, where sandboxd cannot protect it`, {
          remedy: `Mount ${writable.source} at its own path (\`--mount ${writable.source}:rw\`) or read-only.`,
        });
      }
      // Each directory from the mount's top down to the path: a mount point of its own.
      const parts = path.relative(writable.source, entry.path).split(path.sep).filter((part) => part !== '');
      let dir = writable.source;
      let reached = true;
      for (const [index, part] of parts.entries()) {
        dir = path.join(dir, part);
        const last = index === parts.length - 1;
        const stat = await lstatOrNull(dir).catch(() => null);
        if (stat === null) {
          refuse(unprotected(entry.what, entry.path, `does not exist yet inside the writable mount ${writable.source}`, `Create it (\`${entry.kind === 'dir' ? 'mkdir -p' : 'touch'} ${entry.path}\`) so the sandbox gets it read-only, or point your git config elsewhere`));
          reached = false;
          break;
        }
        if (stat.isSymbolicLink()) {
          // Appeared since it was resolved: the next acquire sees it.
          reached = false;
          break;
        }
        if (!last) {
          if (!stat.isDirectory()) {
            reached = false;
            break;
          }
          mount(dir, translate(dir), false, 'path to a file git reads (pinned)');
        }
      }
      if (!reached) continue;
      const target = translate(entry.path);
      if (entry.kind === 'file' || entry.kind === 'dir') mount(entry.path, target, true, `${entry.kind === 'dir' ? 'directory' : 'file'} git reads: ${entry.what} (read-only)`.slice(0, 180));
      else if (entry.kind === 'worktree' && entry.path !== writable.source) mount(entry.path, target, false, 'work tree (pinned)');
    }
  }
  const [first, ...more] = refusals;
  if (first !== undefined) {
    if (more.length === 0) throw first;
    const all = refusals.map((error) => error.message.replace(/: the sandbox could make what your host's git reads there$/, ''));
    throw new SandboxdError('GIT_PATH_UNPROTECTED', `${all.join('; ')}: the sandbox could make what your host's git reads there`, {
      remedy: `Create them, or point your git config elsewhere, or pass ${ALLOW_UNPROTECTED} to run anyway.`,
    });
  }
  return { mounts, warnings };
}
