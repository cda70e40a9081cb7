import * as z from 'zod/mini';
import { Count, Timestamp } from './common.js';

export const STATUS_ROUTE = '/v1/status';
export const SHUTDOWN_ROUTE = '/v1/shutdown';
/**
 * A newer client asks an older daemon to make way: it stops at once when it holds no session,
 * else once the last one ends, and serves them (and any other) until then.
 */
export const DRAIN_ROUTE = '/v1/drain';

/** What `docker info` said an engine is, the bridge chosen for it and its agent probe (DESIGN §7). */
export const EngineStatus = z.strictObject({
  /** The engine instance: changes when the engine restarts. */
  instance: z.string(),
  kind: z.enum(['docker-desktop', 'orbstack', 'colima', 'rancher-desktop', 'podman', 'docker-engine', 'unknown']),
  /** The engine's own name for itself (`docker info` Name and OperatingSystem). */
  name: z.string(),
  endpoint: z.string(),
  /** `builtin`, `podman-tunnel`, `ssh-tunnel`, `relay`, or `skip: <reason>`. */
  bridge: z.string(),
  identifiedAt: Timestamp,
  probe: z.nullable(
    z.strictObject({
      state: z.enum(['verified', 'missing', 'unusable', 'denied', 'unverified']),
      detail: z.string(),
      keys: Count,
      at: Timestamp,
    }),
  ),
});
export type EngineStatus = z.infer<typeof EngineStatus>;

export const StatusResponse = z.strictObject({
  version: z.string(),
  protocol: z.int(),
  pid: z.int(),
  startedAt: Timestamp,
  uptimeMs: Count,
  socketPath: z.string(),
  logPath: z.nullable(z.string()),
  platform: z.enum(['darwin', 'linux']),
  counts: z.strictObject({
    sessions: Count,
    tunnels: Count,
  }),
  engines: z.array(EngineStatus),
});
export type StatusResponse = z.infer<typeof StatusResponse>;

export const ShutdownResponse = z.strictObject({ stopping: z.literal(true) });
export type ShutdownResponse = z.infer<typeof ShutdownResponse>;

/**
 * `doctor` asks whether the daemon may read a directory: on a Mac, privacy (TCC) judges the daemon
 * apart from the terminal that runs `doctor`. The daemon only opens the directory; no content.
 */
export const READABLE_ROUTE = '/v1/checks/readable';
export const ReadableRequest = z.strictObject({ path: z.string().check(z.minLength(1), z.maxLength(4096), z.refine((value) => value.startsWith('/'), 'an absolute path')) });
export type ReadableRequest = z.infer<typeof ReadableRequest>;
/**
 * Whom macOS privacy (TCC) judges when the daemon opens a protected folder. A process launchd
 * starts is its own responsible process; any other inherits the responsible process of whatever
 * started it, pinned at spawn (a daemon auto-started from a terminal is judged as that terminal).
 */
export const PrivacyPrincipal = z.strictObject({
  /** The real path of the node that runs the daemon: the binary to grant when launchd started it. */
  binary: z.string(),
  /** launchd (the installed service), an app (a terminal or editor), an ssh login, or something that names none. */
  started: z.enum(['launchd', 'app', 'ssh', 'other']),
  /** The app it was started from, as its environment names it (bundle id, else TERM_PROGRAM); null unless `started` is `app`. */
  app: z.nullable(z.string()),
});
export type PrivacyPrincipal = z.infer<typeof PrivacyPrincipal>;
export const ReadableResponse = z.strictObject({
  readable: z.boolean(),
  /** Whom macOS privacy settings judge: what to grant. */
  principal: PrivacyPrincipal,
});
export type ReadableResponse = z.infer<typeof ReadableResponse>;

/** `sessions`: how many the daemon still serves before it stops (0: it stops now). */
export const DrainResponse = z.strictObject({ sessions: Count });
export type DrainResponse = z.infer<typeof DrainResponse>;
