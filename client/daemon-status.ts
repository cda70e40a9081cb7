import { SandboxdError } from '../shared/errors.js';
import { STATUS_ROUTE, StatusResponse } from '../shared/contracts/status.js';
import { PROTOCOL_VERSION } from '../shared/protocol.js';
import { currentPlatform, type SandboxdPaths } from '../shared/paths.js';
import { request } from './transport.js';

/*
 * Asking the daemon how it is, and waiting out a daemon a service manager is starting. Apart from
 * autostart.ts: `sandboxd status` and every connect load this, never what spawning a daemon needs
 * (each module loaded is start-up time).
 */

/** One status call; short because it runs on every connect. */
const DIAL_TIMEOUT_MS = 2_000;
/**
 * Covers a slow start on a loaded machine, and a predecessor that died before writing its pid
 * record (its lock goes stale after ≈4 s; one that did write it is taken over at once).
 */
export const START_TIMEOUT_MS = 20_000;
export const POLL_INTERVAL_MS = 50;

export async function fetchStatus(socketPath: string): Promise<StatusResponse> {
  const status = await request({ socketPath, method: 'GET', route: STATUS_ROUTE, timeoutMs: DIAL_TIMEOUT_MS }, StatusResponse);
  if (status.protocol !== PROTOCOL_VERSION) {
    throw new SandboxdError('PROTOCOL_MISMATCH', `the daemon speaks protocol ${status.protocol}, this client speaks ${PROTOCOL_VERSION}`);
  }
  return status;
}

export async function statusIfRunning(socketPath: string): Promise<StatusResponse | null> {
  try {
    return await fetchStatus(socketPath);
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING') return null;
    throw error;
  }
}

/**
 * The status, or null when nothing listens. Under an installed service, systemd's socket accepts
 * the connection while the daemon is still starting, which can outlast one status call: that is
 * waited out, not reported as a hung daemon.
 */
export async function statusOrColdStart(paths: SandboxdPaths, env: NodeJS.ProcessEnv): Promise<StatusResponse | null> {
  try {
    return await statusIfRunning(paths.socketPath);
  } catch (error) {
    if (!(error instanceof SandboxdError && error.code === 'DAEMON_TIMEOUT')) throw error;
    // Loaded only here: a daemon that answered never needs the service manager's code.
    const [{ installedService }, { managerInputs }] = await Promise.all([import('./service/manager.js'), import('./service/control.js')]);
    const service = await installedService(managerInputs(env, currentPlatform()));
    if (service === null) throw error;
    return waitForService(paths, service.kind);
  }
}

/** The daemon a service manager was asked to start; a cold start may outlast one status call. */
export async function waitForService(paths: SandboxdPaths, manager: string): Promise<StatusResponse> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    try {
      const status = await statusIfRunning(paths.socketPath);
      if (status !== null) return status;
    } catch (error) {
      if (!(error instanceof SandboxdError && error.code === 'DAEMON_TIMEOUT')) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  throw new SandboxdError('DAEMON_START_FAILED', `${manager} was asked to start sandboxd, and it did not answer on ${paths.socketPath} within ${START_TIMEOUT_MS} ms`, {
    remedy: manager === 'systemd' ? 'See `systemctl --user status sandboxd.service` and `sandboxd logs`.' : 'See `sandboxd logs` and launchd.log in the log directory (`sandboxd doctor` names it).',
  });
}

