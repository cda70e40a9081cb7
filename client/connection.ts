import os from 'node:os';
import { assertSocketPathFits, currentPlatform, resolvePaths, type SandboxdPaths } from '../shared/paths.js';

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

/** Also checks the socket path: Node would silently dial a truncated one. */
export function clientPaths(env: NodeJS.ProcessEnv = process.env): SandboxdPaths {
  const platform = currentPlatform();
  const paths = resolvePaths({ platform, env, uid: process.getuid?.() ?? 0, home: env.HOME ?? os.homedir() });
  assertSocketPathFits(paths.socketPath, platform);
  return paths;
}
