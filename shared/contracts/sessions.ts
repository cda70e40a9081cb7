import { z } from 'zod';
import { AbsolutePath, Engine, Id, Timestamp } from './common.js';
import { Plan, SshStatus } from './plan.js';

export const SESSIONS_ROUTE = '/v1/sessions';
export const sessionRoute = (id: string): string => `${SESSIONS_ROUTE}/${encodeURIComponent(id)}`;
export const heartbeatRoute = (id: string): string => `${sessionRoute(id)}/heartbeat`;

export const SshAgentSetting = z.enum(['auto', 'on', 'off']);
export type SshAgentSetting = z.infer<typeof SshAgentSetting>;

export const SshBridgeSetting = z.enum(['auto', 'mount', 'tunnel', 'desktop', 'none']);
export type SshBridgeSetting = z.infer<typeof SshBridgeSetting>;

export const ContainerUser = z.strictObject({
  uid: z.number().int().min(0).max(2 ** 32 - 2),
  gid: z.number().int().min(0).max(2 ** 32 - 2),
  home: AbsolutePath,
});
export type ContainerUser = z.infer<typeof ContainerUser>;

/**
 * The few variables of the client's environment the daemon may use; nothing else is sent, so a
 * request can never carry a whole environment (DESIGN §9).
 */
export const CLIENT_ENV_NAMES = [
  'CONTAINER_CONNECTION',
  'CONTAINER_HOST',
  'CONTAINER_SSHKEY',
  'CONTAINERS_CONF',
  'XDG_CONFIG_HOME',
  'TERM',
  'COLORTERM',
  'GOOGLE_APPLICATION_CREDENTIALS',
] as const;
export const ClientEnv = z.strictObject(
  Object.fromEntries(CLIENT_ENV_NAMES.map((name) => [name, z.string().max(4096).optional()])) as Record<
    (typeof CLIENT_ENV_NAMES)[number],
    z.ZodOptional<z.ZodString>
  >,
);
export type ClientEnv = z.infer<typeof ClientEnv>;

/** What the client knows and the daemon must not take from its own environment (DESIGN §4). */
export const ClientContext = z.strictObject({
  pid: z.number().int().min(1).max(2 ** 31 - 1),
  cwd: AbsolutePath,
  sshAuthSock: z.string().max(4096).optional(),
  path: z.string().max(65536).optional(),
  env: ClientEnv.optional(),
});
export type ClientContext = z.infer<typeof ClientContext>;

export const AcquireRequest = z.strictObject({
  engine: Engine,
  client: ClientContext,
  containerUser: ContainerUser.optional(),
  sshAgent: SshAgentSetting.default('auto'),
  /** How the agent reaches the container; `auto` decides from engine, platform and connection. */
  sshBridge: SshBridgeSetting.default('auto'),
  /** A Podman connection name, overriding CONTAINER_CONNECTION and the default. */
  connection: z.string().min(1).max(200).optional(),
  /** Mount the (canonical) cwd at the same path and make it the working directory. */
  workdir: z.boolean().default(false),
  /** Extra mounts: `path`, `path:ro`, `path:rw`, `src:dst`, `src:dst:ro`, `src:dst:rw`; read-only by default. */
  mounts: z.array(z.string().min(1).max(4096)).max(64).default([]),
  /** Mount ~/.config/gcloud, ~/.aws and GOOGLE_APPLICATION_CREDENTIALS read-only. */
  cloudCredentials: z.boolean().default(false),
  /** More variables for the container, by explicit request only. */
  passEnv: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'must be a variable name'), z.string().max(32_768))
    .refine((env) => Object.keys(env).length <= 64, 'at most 64 variables')
    .default({}),
  /** `readonly` (default): the repository's hooks/ cannot be written from the sandbox. */
  gitHooks: z.enum(['readonly', 'writable']).default('readonly'),
  /** Free text naming the caller (e.g. `llxprt`), shown in `sandboxd sessions ls`. */
  label: z.string().max(100).optional(),
});
export type AcquireRequest = z.input<typeof AcquireRequest>;
export type AcquireInput = z.output<typeof AcquireRequest>;

export const SessionInfo = z.strictObject({
  id: Id,
  engine: Engine,
  label: z.string().nullable(),
  clientPid: z.number().int(),
  createdAt: Timestamp,
  lastHeartbeatAt: Timestamp,
  ssh: SshStatus,
});
export type SessionInfo = z.infer<typeof SessionInfo>;

export const AcquireResponse = z.strictObject({
  session: SessionInfo,
  plan: Plan,
  leaseTtlMs: z.number().int().positive(),
  heartbeatIntervalMs: z.number().int().positive(),
});
export type AcquireResponse = z.infer<typeof AcquireResponse>;

export const HeartbeatResponse = z.strictObject({ session: SessionInfo });
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

export const ReleaseResponse = z.strictObject({ released: z.boolean() });
export type ReleaseResponse = z.infer<typeof ReleaseResponse>;

export const SessionListResponse = z.strictObject({ sessions: z.array(SessionInfo) });
export type SessionListResponse = z.infer<typeof SessionListResponse>;

export const SessionParams = z.strictObject({ id: Id });
