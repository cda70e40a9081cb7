import os from 'node:os';
import { assertSocketPathFits, currentPlatform, resolvePaths, resolveSocketPath, type PathInputs, type SandboxdPaths } from '../shared/paths.js';

export interface ConnectionOptions {
  /** The environment that decides the paths (SANDBOXD_RUNTIME_DIR…); defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** Start the daemon when none answers (default true; SANDBOXD_NO_AUTOSTART=1 turns it off). */
  autoStart?: boolean;
  /**
   * How to run the daemon when starting it, e.g. `['/opt/sandboxd/bin/sandboxd']` (`daemon` is
   * appended). Default: SANDBOXD_BIN, else `sandboxd` on PATH, else this package's own CLI.
   */
  daemonCommand?: string[];
}

function pathInputs(env: NodeJS.ProcessEnv): PathInputs {
  return { platform: currentPlatform(), env, uid: process.getuid?.() ?? 0, home: env.HOME ?? os.homedir() };
}

/** Also checks the socket path: Node would silently dial a truncated one. */
export function clientPaths(env: NodeJS.ProcessEnv = process.env): SandboxdPaths {
  const inputs = pathInputs(env);
  const paths = resolvePaths(inputs);
  assertSocketPathFits(paths.socketPath, inputs.platform);
  return paths;
}

/** The daemon's socket alone, checked as clientPaths checks it: all an acquire needs until it has to start a daemon. */
export function clientSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  const inputs = pathInputs(env);
  const socketPath = resolveSocketPath(inputs);
  assertSocketPathFits(socketPath, inputs.platform);
  return socketPath;
}
