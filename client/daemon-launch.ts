import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../shared/errors.js';
import type { Platform } from '../shared/paths.js';
import { findExecutable, isExecutableFile } from '../daemon/executables.js';

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
  /** This package's own CLI entry; absent when the client was bundled into another file. */
  readonly packageEntry: string;
  /** The runtime that runs `packageEntry`. */
  readonly execPath: string;
}

const NOT_FOUND_REMEDY = 'Set SANDBOXD_BIN to the path of the `sandboxd` executable, or put `sandboxd` on PATH.';

/**
 * DESIGN §10: a client bundled into another program cannot find the daemon next to itself, so
 * the order is the caller's option, SANDBOXD_BIN, `sandboxd` on PATH, then this package's CLI.
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
  try {
    await fs.access(inputs.packageEntry, constants.R_OK);
  } catch {
    throw new SandboxdError(
      'DAEMON_START_FAILED',
      `cannot find the sandboxd executable: no daemonCommand option, SANDBOXD_BIN unset, no sandboxd on PATH, and no ${inputs.packageEntry}`,
      { remedy: NOT_FOUND_REMEDY },
    );
  }
  return { file: inputs.execPath, args: [inputs.packageEntry, 'daemon'], source: 'package' };
}

const KEPT_VARIABLES = ['HOME', 'USER', 'LOGNAME', 'XDG_RUNTIME_DIR', 'XDG_STATE_HOME', 'XDG_CONFIG_HOME'];
const SYSTEM_PATH: Record<Platform, readonly string[]> = {
  linux: ['/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
  darwin: ['/opt/homebrew/bin', '/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin'],
};

/**
 * The daemon outlives the client that started it and serves every later session, so it gets none
 * of that client's settings (CONTAINERS_CONF and the like would leak into other sessions'
 * discovery; each session sends its own): only who the user is, where sandboxd's files live, and a
 * PATH of system directories plus the directories of the command and of this runtime, so that a
 * `#!/usr/bin/env node` script finds its interpreter.
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
