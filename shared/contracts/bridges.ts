import * as z from 'zod/mini';
import { Count, Id, Timestamp } from './common.js';

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
  connection: z.nullable(z.string()),
  hostAgentSocket: z.string(),
  /** Where the served socket lives: host path for a relay, VM path for a tunnel. */
  socketPath: z.string(),
  state: BridgeState,
  refs: Count,
  /** The sessions' own sockets it serves now (DESIGN §9: each session's agent is its own). */
  endpoints: Count,
  /** Connections open now toward the host socket, across every session (bounded). */
  open: Count,
  /** Connections a bound refused on some session's socket since the bridge was made. */
  refused: Count,
  pid: z.nullable(z.int()),
  restarts: Count,
  createdAt: Timestamp,
  lastError: z.nullable(z.string()),
});
export type BridgeInfo = z.infer<typeof BridgeInfo>;

export const BridgeListResponse = z.strictObject({ tunnels: z.array(BridgeInfo) });
export type BridgeListResponse = z.infer<typeof BridgeListResponse>;

export const BridgeResponse = z.strictObject({ tunnel: BridgeInfo });
export const BridgeRemoveResponse = z.strictObject({ removed: z.boolean() });
export const BridgeParams = z.strictObject({ id: Id });
