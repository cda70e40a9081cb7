import type { RunSubprocess, SubprocessResult } from '../os/subprocess.js';

/**
 * The host's git as the daemon runs it on the user's repository while a sandbox's work comes home:
 * only configuration the daemon chose beyond the repository's own (no system or global file, no
 * hooks, no fsmonitor, objects checked by fsck on the way in, no automatic gc), no inherited `GIT_*`
 * variable, never a prompt, never a submodule entered, and bounded in time. The repository is
 * named by its git dir and work tree, never discovered from a directory a sandbox could write.
 */
export interface HostGitDeps {
  run: RunSubprocess;
  /** The git binary (the session's own, found on its PATH). */
  git: string;
  /** An empty directory nobody writes: hooks are looked for there. */
  emptyDir: string;
  /** PATH for what git itself starts (upload-pack for a local fetch). */
  path: string;
}

export interface GitTarget {
  gitDir: string;
  workTree?: string;
}

export const HOST_GIT_TIMEOUT_MS = 60_000;

export function hardenedArgs(emptyDir: string): string[] {
  return [
    '-c', `core.hooksPath=${emptyDir}`,
    '-c', 'core.fsmonitor=false',
    '-c', 'core.untrackedCache=false',
    '-c', 'transfer.fsckObjects=true',
    '-c', 'fetch.fsckObjects=true',
    '-c', 'receive.fsckObjects=true',
    '-c', 'gc.auto=0',
    '-c', 'maintenance.auto=false',
    '-c', 'fetch.recurseSubmodules=false',
    '-c', 'submodule.recurse=false',
    '-c', 'protocol.file.allow=always',
    // The daemon acts for the user on the repository the user ran the session in, whoever owns it.
    '-c', 'safe.directory=*',
  ];
}

export function hardenedEnv(pathVariable: string): Record<string, string> {
  return {
    PATH: pathVariable,
    HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    GIT_OPTIONAL_LOCKS: '0',
    LC_ALL: 'C',
  };
}

export class HostGit {
  constructor(private readonly deps: HostGitDeps) {}

  get binary(): string {
    return this.deps.git;
  }

  run(target: GitTarget, args: readonly string[], timeoutMs = HOST_GIT_TIMEOUT_MS, maxOutputBytes?: number): Promise<SubprocessResult> {
    const where = ['--git-dir', target.gitDir, ...(target.workTree === undefined ? [] : ['--work-tree', target.workTree])];
    return this.deps.run(this.deps.git, [...hardenedArgs(this.deps.emptyDir), ...where, ...args], {
      env: hardenedEnv(this.deps.path),
      // Never a directory the sandbox writes: git looks for nothing there with its dir named.
      clientCwd: target.workTree ?? target.gitDir,
      timeoutMs,
      maxOutputBytes,
    });
  }
}

/** The first line of git's complaint, for a message. */
export function gitComplaint(result: SubprocessResult): string {
  const line = result.stderr.split('\n').find((text) => text.trim() !== '') ?? `exit ${String(result.exitCode)}`;
  return line.replace(/^(fatal|error): /, '').slice(0, 300);
}
