import * as z from 'zod/mini';
import { DRAIN_ROUTE, DrainResponse, SHUTDOWN_ROUTE } from '../shared/contracts/status.js';
import { SandboxdError } from '../shared/errors.js';
import { currentPlatform } from '../shared/paths.js';
import { PROTOCOL_VERSION } from '../shared/protocol.js';
import { createProcessProbe } from '../daemon/os/process-identity.js';
import { readAnyStatus, type AnyStatus } from './any-status.js';
import { request } from './transport.js';

const STOP_TIMEOUT_MS = 6_000;

/**
 * How many sessions the older daemon keeps serving before it stops (0: it is stopping now).
 * A daemon from before the drain route refuses it: then only an idle one is stopped, as then.
 */
async function askToMakeWay(socketPath: string, status: AnyStatus): Promise<number | null> {
  try {
    return (await request({ socketPath, method: 'POST', route: DRAIN_ROUTE, anyProtocol: true, closeConnection: true }, DrainResponse)).sessions;
  } catch (error) {
    if (!(error instanceof SandboxdError && (error.code === 'PROTOCOL_MISMATCH' || error.code === 'NOT_FOUND'))) throw error;
  }
  if (status.counts?.sessions !== 0) return null;
  await request({ socketPath, method: 'POST', route: SHUTDOWN_ROUTE, anyProtocol: true, closeConnection: true }, z.unknown());
  return 0;
}

/**
 * Step 4 of the protocol policy (shared/protocol-policy.ts): a client newer than the running
 * daemon has it make way. An idle one stops at once and this resolves true once it is gone, so
 * the caller starts its own; one with sessions keeps serving them, stops once the last ends, and
 * this throws PROTOCOL_MISMATCH saying so. A newer daemon is left alone (false).
 */
export async function replaceOlderDaemon(socketPath: string): Promise<boolean> {
  const status = await readAnyStatus(socketPath);
  const { pid } = status;
  if (status.protocol >= PROTOCOL_VERSION || pid === undefined) return false;
  const left = await askToMakeWay(socketPath, status);
  const older = `the running daemon (pid ${String(pid)}) is an older sandboxd (protocol ${String(status.protocol)}; this client speaks ${String(PROTOCOL_VERSION)})`;
  if (left === null) {
    throw new SandboxdError('PROTOCOL_MISMATCH', `${older} and serves ${String(status.counts?.sessions ?? 'unknown')} sessions`, {
      remedy: 'Run `sandboxd restart` once its sessions end, to start the installed version.',
    });
  }
  if (left > 0) {
    throw new SandboxdError('PROTOCOL_MISMATCH', `${older}: it keeps serving its ${String(left)} session${left === 1 ? '' : 's'} and stops once they end; the next start runs this version`, {
      remedy: 'Try again once they end (`sandboxd status` counts them), or run `sandboxd restart` now (their containers keep the agent for at most one lease: their clients, of the older release, cannot renew it).',
    });
  }
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
