import * as z from 'zod/mini';
import { AbsolutePath, Count, Engine, ExecText, Id, Timestamp } from './common.js';
import { isNormalCredentialHost, MAX_GIT_CREDENTIAL_HOST_LENGTH, MAX_GIT_CREDENTIAL_HOSTS } from '../git-credential-hosts.js';
import { Plan, SshStatus } from './plan.js';
import { CLIENT_ENV_NAMES, MAX_HEARTBEAT_BATCH, SSH_AGENT_SETTINGS, SSH_BRIDGE_SETTINGS } from './session-routes.js';

export { CLIENT_ENV_NAMES, HEARTBEATS_ROUTE, MAX_HEARTBEAT_BATCH, SESSIONS_ROUTE, SSH_AGENT_SETTINGS, SSH_BRIDGE_SETTINGS, heartbeatRoute, sessionRemoveRoute, sessionRoute } from './session-routes.js';

export const SshAgentSetting = z.enum(SSH_AGENT_SETTINGS);
export type SshAgentSetting = z.infer<typeof SshAgentSetting>;

export const SshBridgeSetting = z.enum(SSH_BRIDGE_SETTINGS);
export type SshBridgeSetting = z.infer<typeof SshBridgeSetting>;

export const ContainerUser = z.strictObject({
  uid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)),
  gid: z.int().check(z.minimum(0), z.maximum(2 ** 32 - 2)),
  /**
   * That user's HOME in the image, when known. Git finds its config through GIT_CONFIG_GLOBAL
   * whatever HOME is; a known HOME also gets the config files mounted under it, for git < 2.32.
   */
  // eslint-disable-next-line no-control-regex -- a HOME with a newline or tab is refused, not mounted around
  home: z.optional(AbsolutePath.check(z.refine((value) => !/[\u0000-\u001f\u007f]/.test(value), 'must not contain control characters'))),
});
export type ContainerUser = z.infer<typeof ContainerUser>;

export const ClientEnv = z.strictObject(
  Object.fromEntries(CLIENT_ENV_NAMES.map((name) => [name, z.optional(ExecText(4096))])) as Record<
    (typeof CLIENT_ENV_NAMES)[number],
    z.ZodMiniOptional<ReturnType<typeof ExecText>>
  >,
);
export type ClientEnv = z.infer<typeof ClientEnv>;

/** What the client knows and the daemon must not take from its own environment (DESIGN §4). */
export const ClientContext = z.strictObject({
  pid: z.int().check(z.minimum(1), z.maximum(2 ** 31 - 1)),
  cwd: AbsolutePath,
  sshAuthSock: z.optional(ExecText(4096)),
  path: z.optional(ExecText(65536)),
  env: z.optional(ClientEnv),
});
export type ClientContext = z.infer<typeof ClientContext>;

/** A variable name the container may be given. */
const VariableName = z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'must be a variable name'));

/** At most this many extra host sockets per session: each one is a bridge to hold. */
export const MAX_HOST_SOCKETS = 8;

/**
 * A host Unix socket besides the agent that the container should reach (llxprt's credential
 * proxy, a gpg-agent): bridged like the agent, mounted at `/run/sandboxd/sockets/<name>/`.
 */
export const HostSocketRequest = z.strictObject({
  name: z.string().check(z.regex(/^[a-z][a-z0-9-]{0,31}$/, 'must be 1-32 of a-z, 0-9 and "-", starting with a letter')),
  hostPath: AbsolutePath,
  /** Variable set in the container to the socket's in-container path. */
  env: z.optional(VariableName),
});
export type HostSocketRequest = z.infer<typeof HostSocketRequest>;

function distinct(values: (string | undefined)[]): boolean {
  const defined = values.filter((value) => value !== undefined);
  return new Set(defined).size === defined.length;
}

/** Hosts as the daemon accepts them: already normalised (shared/git-credential-hosts.ts), each once. */
export const GitCredentialHosts = z.array(
  z.string().check(
    z.maxLength(MAX_GIT_CREDENTIAL_HOST_LENGTH),
    z.refine(isNormalCredentialHost, 'must be a host or host:port in lower case, without a scheme, path, user, wildcard or :443'),
  ),
).check(
  z.maxLength(MAX_GIT_CREDENTIAL_HOSTS),
  z.refine((hosts) => distinct(hosts), 'hosts must differ'),
);

export const AcquireRequest = z.strictObject({
  engine: Engine,
  client: ClientContext,
  containerUser: z.optional(ContainerUser),
  sshAgent: z._default(SshAgentSetting, 'auto'),
  /** How the agent reaches the container; `auto` decides from engine, platform and connection. */
  sshBridge: z._default(SshBridgeSetting, 'auto'),
  /** A Podman connection name, overriding CONTAINER_CONNECTION and the default. */
  connection: z.optional(ExecText(200).check(z.minLength(1))),
  /** Mount the (canonical) cwd at the same path and make it the working directory. */
  workdir: z._default(z.boolean(), false),
  /** Allow a workdir that is `/`, the home directory or one of its ancestors (refused otherwise). */
  allowWideWorkdir: z._default(z.boolean(), false),
  /** Extra mounts: `path`, `path:ro`, `path:rw`, `src:dst`, `src:dst:ro`, `src:dst:rw`; read-only by default. */
  mounts: z._default(z.array(ExecText(4096).check(z.minLength(1))).check(z.maxLength(64)), []),
  /** Mount ~/.config/gcloud, ~/.aws and GOOGLE_APPLICATION_CREDENTIALS read-only. */
  cloudCredentials: z._default(z.boolean(), false),
  /** More variables for the container, by explicit request only. */
  passEnv: z._default(
    z.record(VariableName, ExecText(32_768)).check(z.refine((env) => Object.keys(env).length <= 64, 'at most 64 variables')),
    {},
  ),
  /**
   * `readonly` (default): the hooks/ of the sandbox's git dir are an empty read-only directory;
   * `writable` lets the sandbox install hooks there, which run only in the sandbox (the host's git
   * never reads the sandbox's git dir).
   */
  gitHooks: z._default(z.enum(['readonly', 'writable']), 'readonly'),
  /**
   * `readonly` (default): the sandbox's copy of the repository's config is read-only; `writable`
   * lets the sandbox change its copy (`git push -u`, `git remote add`), which the host never reads.
   */
  gitConfig: z._default(z.enum(['readonly', 'writable']), 'readonly'),
  /**
   * Run even though a path your git config names (an include, `core.hooksPath`, `init.templateDir`…)
   * cannot be held read-only inside a writable mount (it does not exist yet, or a symbolic link
   * leads to it): the sandbox could make what your host's git reads there. Refused with
   * GIT_PATH_UNPROTECTED unless set.
   */
  allowUnprotectedGitPaths: z._default(z.boolean(), false),
  /**
   * The image the session will run, when the caller knows it. Accepted from older callers and not
   * used: a Docker Desktop-style engine's built-in agent socket is verified with sandboxd's own image.
   */
  image: z.optional(ExecText(1024).check(z.minLength(1))),
  /** Free text naming the caller (e.g. `llxprt`), shown in `sandboxd sessions ls`. */
  label: z.optional(z.string().check(z.maxLength(100))),
  /** Extra host sockets; one that does not answer is skipped with a warning, never fatal. */
  sockets: z._default(
    z.array(HostSocketRequest).check(
      z.maxLength(MAX_HOST_SOCKETS),
      z.refine((sockets) => distinct(sockets.map((socket) => socket.name)), 'socket names must differ'),
      z.refine((sockets) => distinct(sockets.map((socket) => socket.env)), 'socket variables must differ'),
    ),
    [],
  ),
  /**
   * Hosts (`host` or `host:port`, normalised: lower case, no :443) whose https credentials git in
   * the container may ask the host's own credential helpers for, `get` only.
   */
  gitCredentials: z._default(GitCredentialHosts, []),
  /**
   * The hardened profile: read-only root with a tmpfs /tmp, no capabilities, no-new-privileges and
   * a pids limit; the caller's own run arguments win where they set the same thing.
   */
  harden: z._default(z.boolean(), false),
  /**
   * The lease this request renews (the daemon restarted and forgot it): its container, if a
   * previous daemon recorded one, becomes this session's.
   */
  renews: z.optional(Id),
});
export type AcquireRequest = z.input<typeof AcquireRequest>;
export type AcquireInput = z.output<typeof AcquireRequest>;

/** The container a session's plan names: `--cidfile` here, labelled with the session id. */
export const SessionContainer = z.strictObject({
  /** Read from the cidfile; null until the engine has created the container. */
  id: z.nullable(z.string()),
  cidfile: AbsolutePath,
});
export type SessionContainer = z.infer<typeof SessionContainer>;

/** A ref of the sandbox's that was not applied to the host's repository, and what keeps it. */
export const HeldRef = z.strictObject({
  /** The sandbox's ref (`refs/heads/feature`). */
  ref: z.string().check(z.maxLength(4096)),
  /** Where its commit waits on the host (`refs/sandboxd/<session>/feature`); null when its objects never arrived. */
  keptAs: z.nullable(z.string().check(z.maxLength(4200))),
  reason: z.string().check(z.maxLength(4096)),
  /** What to run in the repository to take it in; null when nothing was kept. */
  command: z.nullable(z.string().check(z.maxLength(8400))),
});
export type HeldRef = z.infer<typeof HeldRef>;

/** How the sandbox's git work comes home (DESIGN §8): what waits, and why. */
export const SessionGit = z.strictObject({
  /** The host repository's common dir the sandbox's git dir stands in for. */
  repository: AbsolutePath,
  held: z.array(HeldRef).check(z.maxLength(256)),
  /** What was left as it was on the host and why (a HEAD that did not follow, an index left alone). */
  notes: z.array(z.string().check(z.maxLength(4096))).check(z.maxLength(64)),
  /** Why the sandbox's work could not be brought home at all (a bound it exceeded), when so. */
  error: z.nullable(z.string().check(z.maxLength(4096))),
});
export type SessionGit = z.infer<typeof SessionGit>;

export const SessionInfo = z.strictObject({
  id: Id,
  engine: Engine,
  label: z.nullable(z.string()),
  clientPid: z.int(),
  createdAt: Timestamp,
  lastHeartbeatAt: Timestamp,
  ssh: SshStatus,
  container: z.nullable(SessionContainer),
  /** Connections refused on the session's own sockets (the agent's and extra ones) by their bounds. */
  refused: Count,
  /** The repository the session's sandbox works in; null outside one. */
  git: z.nullable(SessionGit),
  /** The hosts whose https credentials the session's git may ask the host for (none when not served). */
  gitCredentials: z.array(z.string()),
});
export type SessionInfo = z.infer<typeof SessionInfo>;

export const HostSocketStatus = z.discriminatedUnion('status', [
  z.strictObject({
    name: z.string(),
    status: z.literal('forwarded'),
    bridge: z.enum(['mount', 'tunnel']),
    /** The socket inside the container. */
    socket: AbsolutePath,
    /** The host socket that is served (realpath). */
    hostSocket: AbsolutePath,
    bridgeId: z.string(),
    env: z.nullable(z.string()),
  }),
  z.strictObject({ name: z.string(), status: z.literal('skipped'), reason: z.string() }),
]);
export type HostSocketStatus = z.infer<typeof HostSocketStatus>;

/**
 * Whether git in the container asks the host's credential helpers, and for which hosts: null
 * when the session asked for none.
 */
export const GitCredentialsStatus = z.nullable(
  z.discriminatedUnion('status', [
    z.strictObject({
      status: z.literal('served'),
      hosts: z.array(z.string()),
      bridge: z.enum(['mount', 'tunnel']),
      /** The socket inside the container that git's credential helper asks. */
      socket: AbsolutePath,
    }),
    z.strictObject({ status: z.literal('skipped'), hosts: z.array(z.string()), reason: z.string() }),
  ]),
);
export type GitCredentialsStatus = z.infer<typeof GitCredentialsStatus>;

export const AcquireResponse = z.strictObject({
  session: SessionInfo,
  plan: Plan,
  leaseTtlMs: z.int().check(z.positive()),
  heartbeatIntervalMs: z.int().check(z.positive()),
  /** One entry per requested socket, in request order. */
  sockets: z.array(HostSocketStatus),
  gitCredentials: GitCredentialsStatus,
});
export type AcquireResponse = z.infer<typeof AcquireResponse>;

export const HeartbeatResponse = z.strictObject({ session: SessionInfo });
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

export const HeartbeatBatchRequest = z.strictObject({ sessions: z.array(Id).check(z.minLength(1), z.maxLength(MAX_HEARTBEAT_BATCH)) });
export type HeartbeatBatchRequest = z.infer<typeof HeartbeatBatchRequest>;

/** The ids the daemon no longer knows (restarted, or reaped them): their clients renew those leases. */
export const HeartbeatBatchResponse = z.strictObject({ unknown: z.array(Id) });
export type HeartbeatBatchResponse = z.infer<typeof HeartbeatBatchResponse>;

/** `git`: what the session's last sync left waiting (null outside a repository or for a lease this daemon did not grant). */
export const ReleaseResponse = z.strictObject({ released: z.boolean(), git: z.nullable(SessionGit) });
export type ReleaseResponse = z.infer<typeof ReleaseResponse>;

/** `DELETE /v1/sessions/:id?remove=container`: end the session and remove its container now. */
export const SessionDeleteQuery = z.strictObject({ remove: z.optional(z.literal('container')) });

export const SessionRemoveResponse = z.strictObject({
  removed: z.literal(true),
  /** Ids of the containers that were stopped and removed (empty when none was running). */
  containers: z.array(z.string()),
});
export type SessionRemoveResponse = z.infer<typeof SessionRemoveResponse>;

export const SessionListResponse = z.strictObject({ sessions: z.array(SessionInfo) });
export type SessionListResponse = z.infer<typeof SessionListResponse>;

export const SessionParams = z.strictObject({ id: Id });
