import * as z from 'zod/mini';
import { STATUS_ROUTE } from '../shared/contracts/status.js';
import { request } from './transport.js';

/**
 * What every protocol's status has said, read loosely since the daemon may be of any release, past
 * or future: only the protocol is sure to be there.
 */
const AnyStatus = z.object({
  protocol: z.int(),
  version: z.optional(z.string()),
  pid: z.optional(z.int()),
  counts: z.optional(z.object({ sessions: z.int() })),
});
export type AnyStatus = z.infer<typeof AnyStatus>;

/** Which daemon runs, whatever protocol it speaks (`version`, `doctor`, replacing an older one). */
export function readAnyStatus(socketPath: string): Promise<AnyStatus> {
  return request({ socketPath, method: 'GET', route: STATUS_ROUTE, anyProtocol: true, timeoutMs: 2_000 }, AnyStatus);
}
