import { z } from 'zod';
import { STATUS_ROUTE } from '../shared/contracts/status.js';
import { request } from './transport.js';

/** What every protocol's status has said; read loosely, since the daemon may be of any release. */
const AnyStatus = z.object({
  version: z.string(),
  protocol: z.number().int(),
  pid: z.number().int(),
  counts: z.object({ sessions: z.number().int() }),
});
export type AnyStatus = z.infer<typeof AnyStatus>;

/** Which daemon runs, whatever protocol it speaks (`version`, `doctor`, replacing an older one). */
export function readAnyStatus(socketPath: string): Promise<AnyStatus> {
  return request({ socketPath, method: 'GET', route: STATUS_ROUTE, anyProtocol: true, timeoutMs: 2_000 }, AnyStatus);
}
