import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SandboxdError } from '../shared/errors.js';
import type { Platform } from '../shared/paths.js';
import { findExecutable, isExecutableFile } from '../daemon/os/executables.js';

/** What auto-start runs: `file ...args` (args already end in `daemon`). */
export interface DaemonCommand {
  readonly file: string;
  readonly args: readonly string[];
  /** Which step of the search found it, for error messages and tests. */
  readonly source: 'option' | 'SANDBOXD_BIN' | 'PATH' | 'package';
}

export interface LaunchInputs {
  /** An explicit command (argv prefix; `daemon` is appended), e.g. `['/opt/sandboxd/bin/sandboxd']`. */
  readonly option?: readonly string[];
  /** The client's environment: SANDBOXD_BIN and PATH are read from it. */
  readonly env: NodeJS.ProcessEnv;
  /**
   * The directory of the code that runs (this package's `dist/client`, or the bundle another
   * program made of it); null when the runtime does not say (a CommonJS bundle).
   */
  readonly moduleDir: string | null;
  /** The runtime that runs the package's CLI. */
  readonly execPath: string;
  /** The client runs on Bun: the package's CLI then runs on `node` from PATH when there is one. */
  readonly bun: boolean;
}

const NOT_FOUND_REMEDY = 'Set SANDBOXD_BIN to the path of the `sandboxd` executable, or put `sandboxd` on PATH.';
/** The `sandboxd` command in a package (package.json's `bin`), built by `npm run build`. */
const PACKAGE_CLI = path.join('dist', 'bin', 'sandboxd.js');

/** Where this module runs from; `import.meta.url` is empty in a CommonJS bundle. */
export function thisModuleDir(): string | null {
  const url = (import.meta as { url?: unknown }).url;
  return typeof url === 'string' && url.startsWith('file:') ? path.dirname(fileURLToPath(url)) : null;
}

async function isSandboxdPackage(dir: string): Promise<boolean> {
  try {
    return (JSON.parse(await fs.readFile(path.join(dir, 'package.json'), 'utf8')) as { name?: unknown }).name === 'sandboxd';
  } catch {
    return false;
  }
}

async function readable(file: string): Promise<boolean> {
  try {
    await fs.access(file, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The sandboxd package this code belongs to, or one installed beside the program that bundled it:
 * in each directory from `moduleDir` up, the directory itself (this package run from its own
 * files) and its `node_modules/sandboxd` (a dependency of the program, as Node would resolve it).
 * The nearest whose CLI is built wins.
 */
async function findPackageCli(moduleDir: string): Promise<string | null> {
  for (let dir = moduleDir; ; dir = path.dirname(dir)) {
    for (const root of [dir, path.join(dir, 'node_modules', 'sandboxd')]) {
      const cli = path.join(root, PACKAGE_CLI);
      if ((await isSandboxdPackage(root)) && (await readable(cli))) return cli;
    }
    if (path.dirname(dir) === dir) return null;
  }
}

/** What the search looked at, for a person who must make one of them true. */
function notFound(inputs: LaunchInputs): SandboxdError {
  const where = inputs.moduleDir === null ? 'no package could be looked for: the runtime does not say where this code is' : `no sandboxd package with a built ${PACKAGE_CLI} in ${inputs.moduleDir} or any directory above it, or in their node_modules`;
  return new SandboxdError(
    'DAEMON_START_FAILED',
    `cannot find the sandboxd executable. Looked at: the daemonCommand option (not given), SANDBOXD_BIN (not set), \`sandboxd\` in PATH (${inputs.env.PATH ?? 'not set'}); ${where}`,
    { remedy: NOT_FOUND_REMEDY },
  );
}

/**
 * DESIGN §10: a client bundled into another program cannot find the daemon next to itself, so
 * the order is the caller's option, SANDBOXD_BIN, `sandboxd` on PATH, then the sandboxd package
 * this code belongs to or that the program installed beside itself.
 */
export async function resolveDaemonCommand(inputs: LaunchInputs): Promise<DaemonCommand> {
  if (inputs.option !== undefined) {
    const [first = '', ...rest] = inputs.option;
    const file = first.includes('/') ? path.resolve(first) : await findExecutable(first, inputs.env.PATH);
    if (file === null || !(await isExecutableFile(file))) {
      throw new SandboxdError('DAEMON_START_FAILED', `the daemonCommand option names "${first}", which is not an executable file`, {
        remedy: 'Pass the path of the `sandboxd` executable in daemonCommand, or drop the option and set SANDBOXD_BIN to it.',
      });
    }
    return { file, args: [...rest, 'daemon'], source: 'option' };
  }
  const bin = inputs.env.SANDBOXD_BIN;
  if (bin !== undefined && bin !== '') {
    const file = path.resolve(bin);
    if (!(await isExecutableFile(file))) {
      throw new SandboxdError('DAEMON_START_FAILED', `SANDBOXD_BIN is ${bin}, which is not an executable file`, {
        remedy: 'Set SANDBOXD_BIN to the path of the `sandboxd` executable, or unset it.',
      });
    }
    return { file, args: ['daemon'], source: 'SANDBOXD_BIN' };
  }
  const found = await findExecutable('sandboxd', inputs.env.PATH);
  if (found !== null) return { file: found, args: ['daemon'], source: 'PATH' };
  const cli = inputs.moduleDir === null ? null : await findPackageCli(inputs.moduleDir);
  if (cli === null) throw notFound(inputs);
  // The daemon outlives this client and serves every other; it is built and tested on Node.
  const runtime = inputs.bun ? ((await findExecutable('node', inputs.env.PATH)) ?? inputs.execPath) : inputs.execPath;
  return { file: runtime, args: [cli, 'daemon'], source: 'package' };
}

/**
 * Who the user is, where the daemon keeps its code cache (XDG_CACHE_HOME), and where it was started
 * from: macOS privacy judges a daemon this client spawns as the app this client runs under, and
 * these name it (daemon/os/privacy.ts).
 */
const KEPT_VARIABLES = ['HOME', 'USER', 'LOGNAME', 'XDG_RUNTIME_DIR', 'XDG_STATE_HOME', 'XDG_CONFIG_HOME', 'XDG_CACHE_HOME', '__CFBundleIdentifier', 'TERM_PROGRAM', 'SSH_CONNECTION'];
const SYSTEM_PATH: Record<Platform, readonly string[]> = {
  linux: ['/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
  darwin: ['/opt/homebrew/bin', '/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
};

/**
 * The daemon outlives the client that started it and serves every later session, so it gets none
 * of that client's settings (CONTAINERS_CONF and the like would leak into other sessions'
 * discovery; each session sends its own): only who the user is, which app started it, where
 * sandboxd's files live, and a PATH of system directories plus the directories of the command and
 * of this runtime, so that a `#!/usr/bin/env node` script finds its interpreter.
 */
export function daemonEnvironment(env: NodeJS.ProcessEnv, command: DaemonCommand, execPath: string, platform: Platform): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && (KEPT_VARIABLES.includes(name) || name.startsWith('SANDBOXD_'))) picked[name] = value;
  }
  const dirs = [path.dirname(command.file), path.dirname(execPath), ...SYSTEM_PATH[platform]];
  picked.PATH = [...new Set(dirs)].join(path.delimiter);
  return picked;
}

/** A neutral working directory: the daemon must not pin the first client's (say, on a removable volume). */
export const DAEMON_CWD = '/';
