import * as z from 'zod';
import { Timestamp } from './common.js';

export const STATUS_ROUTE = '/v1/status';
export const SHUTDOWN_ROUTE = '/v1/shutdown';

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
  probe: z
    .strictObject({
      state: z.enum(['verified', 'missing', 'unusable', 'unverified']),
      detail: z.string(),
      keys: z.number().int().min(0),
      at: Timestamp,
    })
    .nullable(),
});
export type EngineStatus = z.infer<typeof EngineStatus>;

export const StatusResponse = z.strictObject({
  version: z.string(),
  protocol: z.number().int(),
  pid: z.number().int(),
  startedAt: Timestamp,
  uptimeMs: z.number().int().min(0),
  socketPath: z.string(),
  logPath: z.string().nullable(),
  platform: z.enum(['darwin', 'linux']),
  counts: z.strictObject({
    sessions: z.number().int().min(0),
    tunnels: z.number().int().min(0),
  }),
  engines: z.array(EngineStatus),
});
export type StatusResponse = z.infer<typeof StatusResponse>;

export const ShutdownResponse = z.strictObject({ stopping: z.literal(true) });
export type ShutdownResponse = z.infer<typeof ShutdownResponse>;
