import type { AcquireResponse } from './contracts/sessions.js';
import { SandboxdError } from './errors.js';
import { PROTOCOL_VERSION } from './protocol.js';

/**
 * Two CLIs bundling two sandboxd releases share one daemon per user (DESIGN §10). The policy:
 *
 * 1. Every request carries `sandboxd-protocol: <the client's version>`; a request without it comes
 *    from a protocol-1 client, which did not send it.
 * 2. The daemon answers its own version and the one before (OLDEST_SERVED_PROTOCOL), each in that
 *    version's shape (`downgradeAcquireResponse`), and stamps the reply with the version it used.
 * 3. Any other version is refused with PROTOCOL_MISMATCH naming both sides, stamped with the
 *    daemon's own version; nothing is ever half-served.
 * 4. A client accepts only replies in its own version. So a newer client meeting an older daemon
 *    gets PROTOCOL_MISMATCH: the CLI says `sandboxd restart`, the llxprt adapter falls back to
 *    llxprt's own path. One daemon per user stays guaranteed by the instance lock.
 */
export const OLDEST_SERVED_PROTOCOL = Math.max(1, PROTOCOL_VERSION - 1);

/** The version a request asks for, or null when the header is not a version at all. */
export function requestedProtocol(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return 1;
  return /^[1-9][0-9]{0,5}$/.test(value) ? Number(value) : null;
}

export function servesProtocol(version: number | null): version is number {
  return version !== null && version >= OLDEST_SERVED_PROTOCOL && version <= PROTOCOL_VERSION;
}

export function protocolMismatch(version: number | null): SandboxdError {
  const range = OLDEST_SERVED_PROTOCOL === PROTOCOL_VERSION ? `protocol ${PROTOCOL_VERSION}` : `protocols ${OLDEST_SERVED_PROTOCOL} to ${PROTOCOL_VERSION}`;
  return new SandboxdError('PROTOCOL_MISMATCH', `this daemon serves ${range}; the client speaks ${version === null ? 'an unreadable version' : `protocol ${version}`}`, {
    remedy: version !== null && version > PROTOCOL_VERSION ? 'Run `sandboxd restart` to start the newer installed version.' : 'Upgrade the program that embeds the older sandboxd client.',
  });
}

/**
 * The acquire reply as protocol 1 knew it. What protocol 2 added is left out, with a warning for
 * what the session then lacks: the extra-socket statuses; variables passed by name (their values
 * travel in the engine's environment, which a protocol-1 client does not set, and they never go on
 * an argv); engine global arguments a protocol-1 client cannot place (it runs the engine as it
 * always did).
 */
export function downgradeAcquireResponse(response: AcquireResponse, version: number): unknown {
  if (version >= 2) return response;
  const { session, leaseTtlMs, heartbeatIntervalMs } = response;
  const { spawnEnv, globalArgs, ...plan } = response.plan;
  const byName = new Set(Object.keys(spawnEnv));
  const args: string[] = [];
  for (let index = 0; index < plan.args.length; index += 1) {
    const arg = plan.args[index] ?? '';
    const next = plan.args[index + 1];
    if ((arg === '-e' || arg === '--env') && next !== undefined && byName.has(next)) index += 1;
    else args.push(arg);
  }
  const lacking = [
    ...(byName.size === 0 ? [] : [`the variables ${[...byName].sort().join(', ')}`]),
    ...(globalArgs.length === 0 ? [] : [`the engine arguments ${globalArgs.join(' ')}`]),
  ];
  const warnings = lacking.length === 0 ? plan.warnings : [...plan.warnings, `this client speaks protocol 1, so the session goes without ${lacking.join(' and ')}; upgrade it`];
  return { session, plan: { ...plan, args, warnings }, leaseTtlMs, heartbeatIntervalMs };
}
