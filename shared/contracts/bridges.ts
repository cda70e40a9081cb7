import * as z from 'zod';
import { Timestamp } from './common.js';

export const TUNNELS_ROUTE = '/v1/tunnels';
export const tunnelRoute = (id: string): string => `${TUNNELS_ROUTE}/${encodeURIComponent(id)}`;
export const tunnelRestartRoute = (id: string): string => `${tunnelRoute(id)}/restart`;

export const BridgeState = z.enum(['starting', 'ready', 'restarting', 'draining', 'failed', 'stopped']);
export type BridgeState = z.infer<typeof BridgeState>;

/**
 * One shared agent bridge: a local relay (Linux direct mount) or an `ssh -R` tunnel into a
 * Podman machine. `sandboxd tunnels ls` lists both.
 */
export const BridgeInfo = z.strictObject({
  id: z.string(),
  /** `container-relay`: the relay container in a Docker Desktop-style VM, for non-root users. */
  kind: z.enum(['relay', 'tunnel', 'container-relay']),
  connection: z.string().nullable(),
  hostAgentSocket: z.string(),
  /** Where the served socket lives: host path for a relay, VM path for a tunnel. */
  socketPath: z.string(),
  state: BridgeState,
  refs: z.number().int().min(0),
  pid: z.number().int().nullable(),
  restarts: z.number().int().min(0),
  createdAt: Timestamp,
  lastError: z.string().nullable(),
});
export type BridgeInfo = z.infer<typeof BridgeInfo>;

export const BridgeListResponse = z.strictObject({ tunnels: z.array(BridgeInfo) });
export type BridgeListResponse = z.infer<typeof BridgeListResponse>;

export const BridgeResponse = z.strictObject({ tunnel: BridgeInfo });
export const BridgeRemoveResponse = z.strictObject({ removed: z.boolean() });
export const BridgeParams = z.strictObject({ id: z.string().regex(/^[a-z]+_[A-Za-z0-9]{6,40}$/) });
