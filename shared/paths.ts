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
  /** The instance lock and what it guards live in the state dir: one daemon per user and state dir. */
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
  /** The Podman machines' host keys, as ssh learns them on first use (tunnels, probes, doctor). */
  readonly knownHostsPath: string;
  readonly logDir: string;
  readonly logPath: string;
}

/** sun_path limits: Node truncates longer paths silently, so they are checked up front. */
export const MAX_SOCKET_PATH_BYTES: Record<Platform, number> = { darwin: 103, linux: 107 };

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

export const SOCKET_NAME = 'sandboxd.sock';

function socketFits(dir: string, platform: Platform): boolean {
  return Buffer.byteLength(path.resolve(dir, SOCKET_NAME)) <= MAX_SOCKET_PATH_BYTES[platform];
}

/** FNV-1a, 32 bits: tells state dirs apart in a directory name; nothing relies on it being secret. */
function shortHash(text: string): string {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash.toString(16).padStart(8, '0');
}

/**
 * Linux: the socket lives beside the state it serves (`<state dir>/run`), never in a directory the
 * shell's environment decides: `XDG_RUNTIME_DIR` is set in a login shell and unset under `su -`,
 * `sudo -u`, cron and some ssh shells, and two shells of one user must find one daemon. A state
 * dir too deep to hold a socket path falls back to /tmp, named for the uid and the state dir;
 * there the client's ownership check (client/trust.ts) is what keeps another user out.
 */
function linuxRuntimeDir(stateDir: string, uid: number): string {
  const beside = path.join(stateDir, 'run');
  return socketFits(beside, 'linux') ? beside : `/tmp/sandboxd-${String(uid)}-${shortHash(stateDir)}`;
}

function xdgStateHome(env: PathInputs['env'], home: string): string {
  return nonEmpty(env.XDG_STATE_HOME) ?? path.join(home, '.local', 'state');
}

function stateDirOf({ platform, env, home }: PathInputs): string {
  const chosen = nonEmpty(env.SANDBOXD_STATE_DIR);
  if (chosen !== undefined) return path.resolve(chosen);
  return path.resolve(platform === 'darwin' ? path.join(home, 'Library', 'Application Support', 'sandboxd') : path.join(xdgStateHome(env, home), 'sandboxd'));
}

function runtimeDirOf(inputs: PathInputs, stateDir: string): string {
  const chosen = nonEmpty(inputs.env.SANDBOXD_RUNTIME_DIR);
  if (chosen !== undefined) return path.resolve(chosen);
  return inputs.platform === 'darwin' ? stateDir : linuxRuntimeDir(stateDir, inputs.uid);
}

/**
 * The daemon's socket alone, as resolvePaths finds it: what a client on its way to a session
 * needs, without the dozen other paths (a launch pays for each one's path arithmetic).
 */
export function resolveSocketPath(inputs: PathInputs): string {
  return path.join(runtimeDirOf(inputs, stateDirOf(inputs)), SOCKET_NAME);
}

/** DESIGN §3. Pure: the caller supplies platform, env, uid and home. */
export function resolvePaths(inputs: PathInputs): SandboxdPaths {
  const { platform, env, home } = inputs;
  const stateDir = stateDirOf(inputs);
  const runtimeDir = runtimeDirOf(inputs, stateDir);
  const logDir = nonEmpty(env.SANDBOXD_LOG_DIR) ?? (platform === 'darwin' ? path.join(home, 'Library', 'Logs', 'sandboxd') : path.join(xdgStateHome(env, home), 'sandboxd', 'log'));

  return {
    runtimeDir,
    socketPath: path.join(runtimeDir, SOCKET_NAME),
    lockPath: path.join(stateDir, 'daemon.lock'),
    lockGuardPath: path.join(stateDir, 'daemon.lock.guard'),
    pidPath: path.join(stateDir, 'daemon.pid'),
    spawnLockPath: path.join(stateDir, 'spawn.lock'),
    agentsDir: path.join(runtimeDir, 'agents'),
    emptyDir: path.join(runtimeDir, 'empty'),
    stateDir,
    statePath: path.join(stateDir, 'state.json'),
    knownHostsPath: path.join(stateDir, 'known_hosts'),
    logDir: path.resolve(logDir),
    logPath: path.resolve(logDir, 'sandboxd.log'),
  };
}

/**
 * Sockets where earlier releases put the daemon (the runtime dir used to follow XDG_RUNTIME_DIR):
 * a daemon still answering there is a stray that shares this state dir, and a socket nothing
 * answers on is left over. `status` and `doctor` report them; the daemon leaves alone what such a
 * stray may still own.
 */
export function otherLayoutSockets({ platform, env, uid }: PathInputs, paths: SandboxdPaths): string[] {
  if (platform === 'darwin') return [];
  const xdgRuntime = nonEmpty(env.XDG_RUNTIME_DIR);
  const dirs = [
    ...(xdgRuntime === undefined ? [] : [path.join(xdgRuntime, 'sandboxd')]),
    `/run/user/${String(uid)}/sandboxd`,
    `/tmp/sandboxd-${String(uid)}`,
  ];
  const sockets = dirs.map((dir) => path.resolve(dir, SOCKET_NAME));
  return [...new Set(sockets)].filter((socket) => socket !== paths.socketPath);
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
