import path from 'node:path';
import { SandboxdError } from './errors.js';

export type Platform = 'darwin' | 'linux';

export interface PathInputs {
  readonly platform: Platform;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly uid: number;
  readonly home: string;
}

export interface SandboxdPaths {
  readonly runtimeDir: string;
  readonly socketPath: string;
  readonly lockPath: string;
  /** Held only while the daemon lock is taken and its pid record written (instance-lock.ts). */
  readonly lockGuardPath: string;
  readonly pidPath: string;
  readonly spawnLockPath: string;
  readonly agentsDir: string;
  /** Empty and read-only: mounted over a repository's missing hooks/ dir. */
  readonly emptyDir: string;
  readonly stateDir: string;
  readonly statePath: string;
  readonly logDir: string;
  readonly logPath: string;
}

/** sun_path limits: Node truncates longer paths silently, so they are checked up front. */
export const MAX_SOCKET_PATH_BYTES: Record<Platform, number> = { darwin: 103, linux: 107 };

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

const SOCKET_NAME = 'sandboxd.sock';

function socketFits(dir: string, platform: Platform): boolean {
  return Buffer.byteLength(path.resolve(dir, SOCKET_NAME)) <= MAX_SOCKET_PATH_BYTES[platform];
}

/**
 * Linux without XDG_RUNTIME_DIR: a directory under the user's own home, which no other user can
 * create first. /tmp/sandboxd-<uid> is the last resort, for a home too deep to hold a socket path;
 * there the client's ownership check (client/trust.ts) is what keeps another user out.
 */
function linuxFallbackRuntimeDir(xdgState: string, uid: number): string {
  const inHome = path.join(xdgState, 'sandboxd', 'run');
  return socketFits(inHome, 'linux') ? inHome : `/tmp/sandboxd-${uid}`;
}

/** DESIGN §3. Pure: the caller supplies platform, env, uid and home. */
export function resolvePaths({ platform, env, uid, home }: PathInputs): SandboxdPaths {
  const appSupport = path.join(home, 'Library', 'Application Support', 'sandboxd');
  const xdgState = nonEmpty(env.XDG_STATE_HOME) ?? path.join(home, '.local', 'state');
  const xdgRuntime = nonEmpty(env.XDG_RUNTIME_DIR);

  const runtimeDir =
    nonEmpty(env.SANDBOXD_RUNTIME_DIR) ??
    (platform === 'darwin'
      ? appSupport
      : xdgRuntime !== undefined
        ? path.join(xdgRuntime, 'sandboxd')
        : linuxFallbackRuntimeDir(xdgState, uid));
  const stateDir =
    nonEmpty(env.SANDBOXD_STATE_DIR) ?? (platform === 'darwin' ? appSupport : path.join(xdgState, 'sandboxd'));
  const logDir =
    nonEmpty(env.SANDBOXD_LOG_DIR) ??
    (platform === 'darwin' ? path.join(home, 'Library', 'Logs', 'sandboxd') : path.join(xdgState, 'sandboxd', 'log'));

  return {
    runtimeDir: path.resolve(runtimeDir),
    socketPath: path.resolve(runtimeDir, SOCKET_NAME),
    lockPath: path.resolve(runtimeDir, 'daemon.lock'),
    lockGuardPath: path.resolve(runtimeDir, 'daemon.lock.guard'),
    pidPath: path.resolve(runtimeDir, 'daemon.pid'),
    spawnLockPath: path.resolve(runtimeDir, 'spawn.lock'),
    agentsDir: path.resolve(runtimeDir, 'agents'),
    emptyDir: path.resolve(runtimeDir, 'empty'),
    stateDir: path.resolve(stateDir),
    statePath: path.resolve(stateDir, 'state.json'),
    logDir: path.resolve(logDir),
    logPath: path.resolve(logDir, 'sandboxd.log'),
  };
}

/** Throws SOCKET_PATH_TOO_LONG naming the path and the variable that moves it. */
export function assertSocketPathFits(socketPath: string, platform: Platform): void {
  const limit = MAX_SOCKET_PATH_BYTES[platform];
  const length = Buffer.byteLength(socketPath);
  if (length > limit) {
    throw new SandboxdError(
      'SOCKET_PATH_TOO_LONG',
      `socket path ${socketPath} is ${length} bytes; ${platform} allows ${limit}`,
      { remedy: 'Set SANDBOXD_RUNTIME_DIR to a shorter directory, e.g. /tmp/sandboxd-$(id -u).' },
    );
  }
}

export function currentPlatform(): Platform {
  return process.platform === 'darwin' ? 'darwin' : 'linux';
}
