import * as z from 'zod/mini';
import { SHUTDOWN_ROUTE } from '../shared/contracts/status.js';
import { SandboxdError } from '../shared/errors.js';
import { currentPlatform } from '../shared/paths.js';
import { PROTOCOL_VERSION } from '../shared/protocol.js';
import { createProcessProbe } from '../daemon/process-identity.js';
import { readAnyStatus } from './any-status.js';
import { request } from './transport.js';

const STOP_TIMEOUT_MS = 6_000;

/**
 * Step 4 of the protocol policy (shared/protocol-policy.ts): a client newer than the running
 * daemon stops it when it holds no sessions, so the caller can start its own. An older daemon with
 * sessions, or a newer one, is left alone. Resolves true when the older daemon is gone.
 */
export async function stopOlderIdleDaemon(socketPath: string): Promise<boolean> {
  const status = await readAnyStatus(socketPath);
  const { pid } = status;
  if (status.protocol >= PROTOCOL_VERSION || status.counts?.sessions !== 0 || pid === undefined) return false;
  await request({ socketPath, method: 'POST', route: SHUTDOWN_ROUTE, anyProtocol: true, closeConnection: true }, z.unknown());
  const probe = createProcessProbe(currentPlatform());
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (await probe.isSame(pid, null)) {
    if (Date.now() > deadline) {
      throw new SandboxdError('DAEMON_TIMEOUT', `the older daemon (pid ${String(pid)}, protocol ${String(status.protocol)}) did not stop within ${String(STOP_TIMEOUT_MS)} ms`, {
        remedy: `Stop it yourself: \`kill ${String(pid)}\`.`,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return true;
}
