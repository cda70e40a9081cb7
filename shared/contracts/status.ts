import { z } from 'zod';
import { Timestamp } from './common.js';

export const STATUS_ROUTE = '/v1/status';
export const SHUTDOWN_ROUTE = '/v1/shutdown';

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
});
export type StatusResponse = z.infer<typeof StatusResponse>;

export const ShutdownResponse = z.strictObject({ stopping: z.literal(true) });
export type ShutdownResponse = z.infer<typeof ShutdownResponse>;
