import type { ErrorCode } from '../../shared/errors.js';

/** Not an error: the user set LLXPRT_SANDBOXD=0. */
export const OPTED_OUT = 'OPTED_OUT';
export type FallbackCode = typeof OPTED_OUT | ErrorCode;

/**
 * Failures that mean "sandboxd cannot serve this launch; use llxprt's built-in path": sandboxd is
 * not installed or will not start, is not running with auto-start off, speaks another protocol
 * version, is overloaded or stopping, misbehaves, or cannot read llxprt's own run arguments.
 * Everything else fails the launch, because it describes the machine the container needs (the
 * engine, the Podman connection or machine, a mount the user asked for), which llxprt's own path
 * would meet too, and sandboxd's message carries the remedy.
 */
export const FALLBACK_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'DAEMON_NOT_RUNNING',
  'DAEMON_START_FAILED',
  'DAEMON_TIMEOUT',
  'PROTOCOL_MISMATCH',
  'INVALID_RESPONSE',
  'SHUTTING_DOWN',
  'DAEMON_BUSY',
  'SESSION_LIMIT',
  'INSECURE_DIRECTORY',
  'SOCKET_PATH_TOO_LONG',
  'BAD_REQUEST',
  'NOT_FOUND',
  'INTERNAL',
  'RUN_ARGS_UNPARSABLE',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  'HEADERS_TOO_LARGE',
  'REQUEST_TIMEOUT',
]);

export function fallsBack(code: ErrorCode): boolean {
  return FALLBACK_CODES.has(code);
}
