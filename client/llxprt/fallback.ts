import type { ErrorCode } from '../../shared/errors.js';

/** Not an error: the user set LLXPRT_SANDBOXD=0. */
export const OPTED_OUT = 'OPTED_OUT';
/** Not an error: the sandbox is not a container (llxprt's `sandbox-exec` on macOS). */
export const NOT_A_CONTAINER = 'NOT_A_CONTAINER';
/**
 * The plan runs the container through a Podman connection that llxprt's `podman run` would not
 * pick by itself (`SANDBOXD_SSH_BRIDGE=tunnel` with a local podman): llxprt passes no engine
 * arguments before `run`.
 */
export const CONNECTION_NOT_CARRIED = 'CONNECTION_NOT_CARRIED';
export type FallbackCode = typeof OPTED_OUT | typeof NOT_A_CONTAINER | typeof CONNECTION_NOT_CARRIED | ErrorCode;

/**
 * Why llxprt's own path runs instead. Nothing sandboxd says makes llxprt's launch fail: where
 * sandboxd cannot serve it (not installed, not running, another protocol, a machine it cannot
 * bridge), llxprt does what it did before sandboxd, and meets the same broken engine or machine
 * with its own message if that is the cause.
 */
export interface Fallback {
  code: FallbackCode;
  reason: string;
  /** What to do about it, when sandboxd knows. */
  remedy: string | null;
}

/** The user's own choices: said at debug level only. Every other fallback is one visible line. */
const QUIET: ReadonlySet<FallbackCode> = new Set<FallbackCode>([OPTED_OUT, NOT_A_CONTAINER, 'DAEMON_NOT_RUNNING']);

export function isQuiet(code: FallbackCode): boolean {
  return QUIET.has(code);
}

export function isFallback(value: object): value is Fallback {
  return 'code' in value && 'reason' in value;
}

/** The reason, and the remedy when there is one. */
export function describeFallback(fallback: Fallback): string {
  return fallback.remedy === null ? fallback.reason : `${fallback.reason} (${fallback.remedy})`;
}
