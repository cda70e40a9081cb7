import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Platform, SandboxdPaths } from '../../shared/paths.js';
import { isExecutableFile } from '../../daemon/os/executables.js';

export interface CommandResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/** Runs launchctl or systemctl; injected so tests record the calls. */
export type CommandRunner = (file: string, args: readonly string[]) => Promise<CommandResult>;

/** What `install`/`uninstall` do, as data: printed by `--dry-run`, executed by `executeSteps`. */
export type ServiceStep =
  | { kind: 'write'; path: string; content: string }
  | { kind: 'remove'; path: string }
  /** `mayFail`: a failure is expected and fine (unloading what is not loaded). */
  | { kind: 'run'; argv: string[]; mayFail?: boolean }
  /** Polls `argv` until it fails: launchd's `bootout` returns before the job is gone. */
  | { kind: 'wait-until-fails'; argv: string[]; what: string };

/** Everything the rendered files name, found at install time (the service's own PATH is minimal). */
export interface ServiceSpec {
  /** Absolute path of the node binary that runs the daemon. */
  node: string;
  /** Absolute path of the CLI entry script (`dist/bin/sandboxd.js`). */
  entry: string;
  /** Environment for the daemon: PATH and the SANDBOXD_* overrides in force at install time. */
  env: Record<string, string>;
  paths: SandboxdPaths;
}

export interface ServiceManager {
  readonly kind: 'launchd' | 'systemd';
  /** The files install writes; the first one tells whether it is installed. */
  readonly files: readonly string[];
  installSteps(spec: ServiceSpec): ServiceStep[];
  uninstallSteps(): ServiceStep[];
  /** argv that starts, stops, restarts the daemon through the manager. */
  readonly startArgv: string[];
  readonly stopArgv: string[];
  readonly restartArgv: string[];
  /** argv that exits 0 when the manager has the service loaded (enabled). */
  readonly loadedArgv: string[];
  /** argv that exits 0 when the user's service manager answers from this shell at all. */
  readonly reachableArgv: string[];
  /** What to do when it does not: a remedy that does not fail the same way. */
  readonly unreachableRemedy: string;
  /**
   * Why this manager cannot exist on this machine at all (systemd is not the init system), or
   * null: then no shell of the user's would reach it, and auto-start is the way.
   */
  absent(): Promise<string | null>;
  /** The installed service's command (program, entry, arguments), or null when it is not installed. */
  program(): Promise<string[] | null>;
  /** argv whose output says how the service's last run ended. */
  readonly statusArgv: string[];
  lastExit(output: string): string | null;
}

/** Tools whose directories the daemon's PATH keeps: a login agent's PATH is minimal. */
const TOOLS = ['podman', 'docker', 'ssh'];
const SYSTEM_PATH: Record<Platform, readonly string[]> = {
  linux: ['/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
  darwin: ['/opt/homebrew/bin', '/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
};
const KEPT_VARIABLES = ['SANDBOXD_RUNTIME_DIR', 'SANDBOXD_STATE_DIR', 'SANDBOXD_LOG_DIR', 'SANDBOXD_LOG_LEVEL', 'SANDBOXD_TUNNEL_IDLE', 'XDG_STATE_HOME'];


/** The directories where podman, docker and ssh are found on `searchPath`, in PATH order. */
export async function toolDirs(searchPath: string): Promise<string[]> {
  const found: string[] = [];
  for (const tool of TOOLS) {
    for (const dir of searchPath.split(path.delimiter)) {
      if (!path.isAbsolute(dir)) continue;
      if (await isExecutableFile(path.join(dir, tool))) {
        found.push(dir);
        break;
      }
    }
  }
  return found;
}

/** The daemon's environment under a service manager: who it needs, nothing of this shell else. */
export function serviceEnvironment(env: NodeJS.ProcessEnv, dirs: readonly string[], node: string, platform: Platform): Record<string, string> {
  const picked: Record<string, string> = {
    PATH: [...new Set([...dirs, path.dirname(node), ...SYSTEM_PATH[platform]])].join(path.delimiter),
  };
  for (const name of KEPT_VARIABLES) {
    const value = env[name];
    if (value !== undefined && value !== '') picked[name] = value;
  }
  return picked;
}

/** Runs launchctl or systemctl with `env` (default: this process's), bounded at 30 s. */
export function commandRunner(env: NodeJS.ProcessEnv = process.env): CommandRunner {
  return (file, args) =>
    new Promise((resolve) => {
      execFile(file, [...args], { timeout: 30_000, encoding: 'utf8', env }, (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        resolve({ exitCode: code, stdout, stderr: error !== null && stderr === '' ? error.message : stderr });
      });
    });
}

export const execRunner: CommandRunner = commandRunner();

/**
 * The environment `systemctl --user` finds the user's manager with. A shell without
 * XDG_RUNTIME_DIR (`su -`, `sudo -u`, cron) still reaches a manager that runs (the user is logged
 * in elsewhere, or lingering) through its bus in /run/user/<uid>, when that is the user's own.
 */
export async function managerEnvironment(env: NodeJS.ProcessEnv, platform: Platform, uid: number): Promise<NodeJS.ProcessEnv> {
  if (platform !== 'linux' || (env.XDG_RUNTIME_DIR ?? '') !== '' || (env.DBUS_SESSION_BUS_ADDRESS ?? '') !== '') return env;
  const runtime = `/run/user/${String(uid)}`;
  const [dir, bus] = await Promise.all([fs.lstat(runtime).catch(() => null), fs.lstat(path.join(runtime, 'bus')).catch(() => null)]);
  const own = dir?.isDirectory() === true && dir.uid === uid && (dir.mode & 0o077) === 0 && bus?.isSocket() === true && bus.uid === uid;
  return own ? { ...env, XDG_RUNTIME_DIR: runtime } : env;
}

/**
 * The `node` the service runs: the one the user's PATH names (`/opt/homebrew/bin/node`, a link
 * that upgrading node repoints) when it is the very program running now; a realpath into a
 * version directory (`…/Cellar/node/<version>/bin/node`) is removed by the next `brew upgrade`.
 * Else the running program's own path, as it was started.
 */
export async function serviceNode(searchPath: string, execPath: string): Promise<string> {
  const running = await fs.realpath(execPath).catch(() => execPath);
  for (const dir of searchPath.split(path.delimiter)) {
    if (!path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, 'node');
    if (!(await isExecutableFile(candidate))) continue;
    return (await fs.realpath(candidate).catch(() => null)) === running ? candidate : execPath;
  }
  return execPath;
}

export async function fileExists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}
