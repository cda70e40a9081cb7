import type {
  AcquireRequest,
  AcquireResponse,
  ClientEnv,
  ContainerUser,
  SessionInfo,
  SshAgentSetting,
  SshBridgeSetting,
  HostSocketRequest,
  HostSocketStatus,
} from '../shared/contracts/sessions.js';
import { CLIENT_ENV_NAMES, SESSIONS_ROUTE, SSH_BRIDGE_SETTINGS, sessionRoute } from '../shared/contracts/session-routes.js';
import type { Engine } from '../shared/contracts/common.js';
import type { Plan } from '../shared/contracts/plan.js';
import { SandboxdError } from '../shared/errors.js';
import { envFlag } from './env-flags.js';
import { clientPaths, type ConnectionOptions } from './connection.js';
import { request } from './transport.js';

/*
 * Only what sending the acquire takes is loaded up front: the schemas (and zod) load while the
 * daemon works on the answer, and starting a daemon, replacing an older one and heartbeats load
 * when they are first needed. A program that embeds the client pays for nothing else before its
 * first request.
 */
const contracts = () => import('../shared/contracts/sessions.js');

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
  /** `readonly` (default) keeps the repository's hooks/ unwritable from the sandbox. */
  gitHooks?: 'readonly' | 'writable';
  /** Allow a workdir that is `/`, the home directory or one of its ancestors (refused otherwise). */
  allowWideWorkdir?: boolean;
  /** `readonly` (default) keeps the repository's `.git/config` unwritable from the sandbox. */
  gitConfig?: 'readonly' | 'writable';
  containerUser?: ContainerUser;
  label?: string;
  /** The image the session runs; accepted and unused (sandboxd verifies a built-in agent socket with its own image). */
  image?: string;
  /** Extra host sockets, each mounted at `/run/sandboxd/sockets/<name>/` and named in `env` (at most 8). */
  sockets?: HostSocketRequest[];
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

export interface Session {
  /** The current lease: a lease the daemon lost is renewed under a new id (same request, same bridges). */
  readonly id: string;
  readonly info: SessionInfo;
  readonly plan: Plan;
  /** One status per requested socket: forwarded, or skipped with the reason. */
  readonly sockets: HostSocketStatus[];
  /** Idempotent; resolves once the daemon has dropped the lease (or is gone). */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Acquires a session: connects (auto-starting the daemon), sends this process's own SSH_AUTH_SOCK,
 * PATH and cwd (DESIGN §4), and keeps the lease alive with heartbeats that never hold the process.
 */
function pickEnv(env: NodeJS.ProcessEnv): ClientEnv {
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

export async function acquireSession(options: AcquireOptions): Promise<Session> {
  const env = options.env ?? process.env;
  const paths = clientPaths(env);
  const sshBridge = bridgeSetting(options, env);
  const body: AcquireRequest = {
    engine: options.engine,
    client: {
      pid: process.pid,
      cwd: options.cwd ?? process.cwd(),
      ...(env.SSH_AUTH_SOCK === undefined ? {} : { sshAuthSock: env.SSH_AUTH_SOCK }),
      ...(env.PATH === undefined ? {} : { path: env.PATH }),
      env: pickEnv(env),
    },
    sshAgent: options.sshAgent ?? 'auto',
    sshBridge,
    ...(options.connection === undefined ? {} : { connection: options.connection }),
    ...(options.workdir === undefined ? {} : { workdir: options.workdir }),
    ...(options.mounts === undefined ? {} : { mounts: options.mounts }),
    ...(options.cloudCredentials === undefined ? {} : { cloudCredentials: options.cloudCredentials }),
    ...(options.passEnv === undefined ? {} : { passEnv: options.passEnv }),
    ...(options.gitHooks === undefined ? {} : { gitHooks: options.gitHooks }),
    ...(options.gitConfig === undefined ? {} : { gitConfig: options.gitConfig }),
    ...(options.allowWideWorkdir === undefined ? {} : { allowWideWorkdir: options.allowWideWorkdir }),
    ...(options.containerUser === undefined ? {} : { containerUser: options.containerUser }),
    ...(options.label === undefined ? {} : { label: options.label }),
    ...(options.image === undefined ? {} : { image: options.image }),
    ...(options.sockets === undefined ? {} : { sockets: options.sockets }),
    ...(options.harden === undefined ? {} : { harden: options.harden }),
  };
  const post = (renews?: string) =>
    request(
      { socketPath: paths.socketPath, method: 'POST', route: SESSIONS_ROUTE, body: renews === undefined ? body : { ...body, renews }, timeoutMs: ACQUIRE_TIMEOUT_MS },
      async () => (await contracts()).AcquireResponse,
    );
  const autoStart = (options.autoStart ?? true) && !envFlag(env, 'SANDBOXD_NO_AUTOSTART');
  const start = async () => {
    const { ensureDaemon } = await import('./autostart.js');
    return ensureDaemon({ paths, env, autoStart, ...(options.daemonCommand === undefined ? {} : { daemonCommand: options.daemonCommand }) });
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
    await start();
    acquired = await post();
  }
  let current = acquired.session;
  let stopHeartbeats: (() => void) | null = null;
  let renewing: Promise<void> | null = null;
  // The daemon lost the lease (it was restarted, or reaped it while stalled) although this process
  // still holds the container: take a new lease for the same request, so its bridges stay held and
  // the container stays tied to a lease (a restarted daemon hands it over to the new one).
  const renew = (): Promise<void> => {
    renewing ??= post(current.id)
      .then((again) => {
        current = again.session;
      })
      .catch(() => undefined)
      .finally(() => {
        renewing = null;
      });
    return renewing;
  };
  if (options.heartbeat ?? true) {
    const { startHeartbeats } = await import('./heartbeats.js');
    // One timer and one request per interval for all of this process's sessions (client/heartbeats.ts).
    stopHeartbeats = startHeartbeats(paths.socketPath, acquired.heartbeatIntervalMs, {
      id: () => (renewing === null ? current.id : null),
      lost: (id) => {
        if (id === current.id) void renew();
      },
    });
  }

  let released: Promise<void> | null = null;
  const release = (): Promise<void> => {
    released ??= (async () => {
      stopHeartbeats?.();
      // A renewal under way ends with the lease this release must drop.
      await renewing;
      try {
        await request({ socketPath: paths.socketPath, method: 'DELETE', route: sessionRoute(current.id) }, async () => (await contracts()).ReleaseResponse);
      } catch (error) {
        // A daemon that is gone has already dropped the lease.
        if (!(error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING')) throw error;
      }
    })();
    return released;
  };
  return {
    get id() {
      return current.id;
    },
    get info() {
      return current;
    },
    plan: acquired.plan,
    sockets: acquired.sockets,
    release,
    [Symbol.asyncDispose]: release,
  };
}
