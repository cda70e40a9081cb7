import type { AcquireRequest, AcquireResponse, ClientEnv, ContainerUser, SshAgentSetting, SshBridgeSetting, HostSocketRequest } from '../shared/contracts/sessions.js';
import { CLIENT_ENV_NAMES, SESSIONS_ROUTE, SSH_BRIDGE_SETTINGS } from '../shared/contracts/session-routes.js';
import type { Engine } from '../shared/contracts/common.js';
import { SandboxdError } from '../shared/errors.js';
import { parseCredentialHosts } from '../shared/git-credential-hosts.js';
import { envFlag } from './env-flags.js';
import { clientPaths, clientSocketPath, type ConnectionOptions } from './connection.js';
import { holdLease, type Session } from './lease.js';
import { request, sentUnanswered } from './transport.js';
import { AcquireResponseShape } from '../shared/contracts/answer-shapes.js';

export type { Session } from './lease.js';

/*
 * Only what an acquire takes is loaded up front, and no zod: the answer is checked against its
 * shape (shared/contracts/answer-shapes.ts). Starting a daemon, replacing an older one and
 * heartbeats (which the lease starts) load when they are first needed. A program that embeds the
 * client pays for nothing else on its way to a session.
 */

/** Acquire may wait for a cold tunnel, which is bounded at 20 s by the daemon. */
const ACQUIRE_TIMEOUT_MS = 30_000;

export interface AcquireOptions extends ConnectionOptions {
  engine: Engine;
  sshAgent?: SshAgentSetting;
  /** Defaults to SANDBOXD_SSH_BRIDGE, else `auto`. */
  sshBridge?: SshBridgeSetting;
  /** A Podman connection name (else CONTAINER_CONNECTION, else podman's default). */
  connection?: string;
  /** Add the cwd mount and `--workdir` (default false: a CLI that mounts it itself gets no duplicate). */
  workdir?: boolean;
  /** Extra mounts: `path`, `path:ro|rw`, `src:dst`, `src:dst:ro|rw`; read-only by default. */
  mounts?: string[];
  /** Mount ~/.config/gcloud, ~/.aws and GOOGLE_APPLICATION_CREDENTIALS read-only. */
  cloudCredentials?: boolean;
  /** Variables to set in the container beyond TERM and COLORTERM. */
  passEnv?: Record<string, string>;
  /** `writable` lets the sandbox install hooks in its own git dir (they run only there); default `readonly`. */
  gitHooks?: 'readonly' | 'writable';
  /** Allow a workdir that is `/`, the home directory or one of its ancestors (refused otherwise). */
  allowWideWorkdir?: boolean;
  /** `writable` lets the sandbox change its own copy of the repository config (never the host's); default `readonly`. */
  gitConfig?: 'readonly' | 'writable';
  /**
   * Run although a path your git config names (an include, `core.hooksPath`, `init.templateDir`…)
   * cannot be held read-only inside a writable mount (missing, or behind a symbolic link there);
   * refused with GIT_PATH_UNPROTECTED otherwise.
   */
  allowUnprotectedGitPaths?: boolean;
  containerUser?: ContainerUser;
  label?: string;
  /** The image the session runs; accepted and unused (sandboxd verifies a built-in agent socket with its own image). */
  image?: string;
  /** Extra host sockets, each mounted at `/run/sandboxd/sockets/<name>/` and named in `env` (at most 8). */
  sockets?: HostSocketRequest[];
  /**
   * Hosts (`host` or `host:port`) whose https credentials git in the container may ask your host's
   * git credential helpers for, `get` only. Defaults to SANDBOXD_GIT_CREDENTIALS (comma-separated).
   */
  gitCredentials?: string[];
  /** Defaults to process.cwd(). */
  cwd?: string;
  /** Send heartbeats while the session is held (default true). */
  heartbeat?: boolean;
  /**
   * The hardened profile: read-only root with a tmpfs /tmp, `--cap-drop=ALL`,
   * `--security-opt no-new-privileges`, `--pids-limit`; your own run arguments win (applyPlan).
   */
  harden?: boolean;
}

/** The variables of this environment the daemon may use for the session (DESIGN §4). */
export function pickEnv(env: NodeJS.ProcessEnv): ClientEnv {
  const picked: ClientEnv = {};
  for (const name of CLIENT_ENV_NAMES) {
    const value = env[name];
    if (value !== undefined && value !== '') picked[name] = value;
  }
  return picked;
}

function isBridgeSetting(value: string): value is SshBridgeSetting {
  return (SSH_BRIDGE_SETTINGS as readonly string[]).includes(value);
}

function bridgeSetting(options: AcquireOptions, env: NodeJS.ProcessEnv): SshBridgeSetting {
  if (options.sshBridge !== undefined) return options.sshBridge;
  const fromEnv = env.SANDBOXD_SSH_BRIDGE;
  if (fromEnv === undefined || fromEnv === '') return 'auto';
  if (!isBridgeSetting(fromEnv)) {
    throw new SandboxdError('BAD_REQUEST', `SANDBOXD_SSH_BRIDGE is "${fromEnv}"; it must be one of ${SSH_BRIDGE_SETTINGS.join(', ')}`, {
      remedy: 'Fix or unset SANDBOXD_SSH_BRIDGE.',
    });
  }
  return fromEnv;
}

/** The option, else SANDBOXD_GIT_CREDENTIALS, checked and normalised; undefined when none (the request stays as before). */
function credentialHosts(options: AcquireOptions, env: NodeJS.ProcessEnv): string[] | undefined {
  const fromEnv = env.SANDBOXD_GIT_CREDENTIALS;
  const hosts =
    options.gitCredentials !== undefined
      ? parseCredentialHosts(options.gitCredentials, 'gitCredentials')
      : fromEnv === undefined || fromEnv === ''
        ? []
        : parseCredentialHosts([fromEnv], 'SANDBOXD_GIT_CREDENTIALS');
  return hosts.length === 0 ? undefined : hosts;
}

/**
 * An acquire the daemon read and never answered is sent again only once no daemon answers: one
 * that lives may have made the session, and a second acquire would make another. The one it made
 * ends with its lease, as nothing heartbeats it.
 */
async function refuseResend(socketPath: string, error: unknown): Promise<void> {
  const { statusIfRunning } = await import('./daemon-status.js');
  if ((await statusIfRunning(socketPath)) === null) return;
  throw new SandboxdError('DAEMON_TIMEOUT', `the daemon on ${socketPath} read the acquire and closed the connection without answering; it is not sent twice`, {
    cause: error,
    remedy: 'Try again; if it happens again, see `sandboxd logs` and run `sandboxd restart`.',
  });
}

/**
 * Acquires a session: connects (auto-starting the daemon), sends this process's own SSH_AUTH_SOCK,
 * PATH and cwd (DESIGN §4), and keeps the lease alive with heartbeats that never hold the process.
 */
export function acquireSession(options: AcquireOptions): Promise<Session> {
  return acquireSessionWhile(options, undefined);
}

/**
 * acquireSession, with `whileWaiting` run once, when the acquire is first written: a caller's
 * first use of what it runs on the answer (the runtime compiling it on a sample) is paid while
 * the daemon works instead of after the answer. It must not act: the acquire may still fail.
 */
export async function acquireSessionWhile(options: AcquireOptions, whileWaiting: (() => void) | undefined): Promise<Session> {
  const env = options.env ?? process.env;
  const socketPath = clientSocketPath(env);
  const sshBridge = bridgeSetting(options, env);
  const gitCredentials = credentialHosts(options, env);
  // Options left unset stay undefined, which JSON leaves out: the daemon applies its defaults.
  const body: AcquireRequest = {
    engine: options.engine,
    client: { pid: process.pid, cwd: options.cwd ?? process.cwd(), sshAuthSock: env.SSH_AUTH_SOCK, path: env.PATH, env: pickEnv(env) },
    sshAgent: options.sshAgent ?? 'auto',
    sshBridge,
    connection: options.connection,
    workdir: options.workdir,
    mounts: options.mounts,
    cloudCredentials: options.cloudCredentials,
    passEnv: options.passEnv,
    gitHooks: options.gitHooks,
    gitConfig: options.gitConfig,
    allowUnprotectedGitPaths: options.allowUnprotectedGitPaths,
    allowWideWorkdir: options.allowWideWorkdir,
    containerUser: options.containerUser,
    label: options.label,
    image: options.image,
    sockets: options.sockets,
    harden: options.harden,
    gitCredentials,
  };
  let waiting = whileWaiting;
  const once = (): void => {
    const run = waiting;
    waiting = undefined;
    run?.();
  };
  const post = (renews?: string) =>
    request(
      { socketPath, method: 'POST', route: SESSIONS_ROUTE, body: renews === undefined ? body : { ...body, renews }, timeoutMs: ACQUIRE_TIMEOUT_MS, whileWaiting: once },
      AcquireResponseShape,
    );
  const autoStart = (options.autoStart ?? true) && !envFlag(env, 'SANDBOXD_NO_AUTOSTART');
  const start = async () => {
    const { ensureDaemon } = await import('./autostart.js');
    return ensureDaemon({ paths: clientPaths(env), env, autoStart, daemonCommand: options.daemonCommand });
  };
  let acquired: AcquireResponse;
  try {
    // Every reply carries the protocol version, so a running daemon needs no status call first.
    acquired = await post();
  } catch (error) {
    const code = error instanceof SandboxdError ? error.code : null;
    // SANDBOXD_NO_AUTOSTART=1 is the user's word for every auto-starting caller. A daemon of an
    // older release makes way for this one (shared/protocol-policy.ts): ensureDaemon sees to it.
    if (!(code === 'DAEMON_NOT_RUNNING' || (code === 'PROTOCOL_MISMATCH' && autoStart))) throw error;
    if (sentUnanswered(error)) await refuseResend(socketPath, error);
    await start();
    acquired = await post();
  }
  return holdLease(acquired, { socketPath, renew: post, heartbeat: options.heartbeat ?? true });
}
