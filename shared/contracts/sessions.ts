import * as z from 'zod/mini';
import { AbsolutePath, Count, Engine, ExecText, Id, Timestamp } from './common.js';
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
  /** `readonly` (default): the repository's hooks/ cannot be written from the sandbox. */
  gitHooks: z._default(z.enum(['readonly', 'writable']), 'readonly'),
  /**
   * `readonly` (default): the repository's own config (`.git/config`, `config.worktree`) cannot be
   * written from the sandbox, since it can name programs the host's next git command runs.
   */
  gitConfig: z._default(z.enum(['readonly', 'writable']), 'readonly'),
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

export const AcquireResponse = z.strictObject({
  session: SessionInfo,
  plan: Plan,
  leaseTtlMs: z.int().check(z.positive()),
  heartbeatIntervalMs: z.int().check(z.positive()),
  /** One entry per requested socket, in request order. */
  sockets: z.array(HostSocketStatus),
});
export type AcquireResponse = z.infer<typeof AcquireResponse>;

export const HeartbeatResponse = z.strictObject({ session: SessionInfo });
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

export const HeartbeatBatchRequest = z.strictObject({ sessions: z.array(Id).check(z.minLength(1), z.maxLength(MAX_HEARTBEAT_BATCH)) });
export type HeartbeatBatchRequest = z.infer<typeof HeartbeatBatchRequest>;

/** The ids the daemon no longer knows (restarted, or reaped them): their clients renew those leases. */
export const HeartbeatBatchResponse = z.strictObject({ unknown: z.array(Id) });
export type HeartbeatBatchResponse = z.infer<typeof HeartbeatBatchResponse>;

export const ReleaseResponse = z.strictObject({ released: z.boolean() });
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
