import { SandboxdError } from './errors.js';
import { PROTOCOL_VERSION } from './protocol.js';

/**
 * Two CLIs bundling two sandboxd releases share one daemon per user (DESIGN §10). The policy:
 *
 * 1. Every request carries `sandboxd-protocol: <the client's version>`; a request without it comes
 *    from a protocol-1 client, which did not send it.
 * 2. The daemon serves exactly its own version. Any other is refused with PROTOCOL_MISMATCH naming
 *    both sides, in the error shape every version reads, before anything is done: nothing is ever
 *    half-served, and no reply can fail a client's schema.
 * 3. A client accepts only replies stamped with its own version.
 * 4. A newer client that meets an older daemon with no sessions replaces it (stop, then start its
 *    own): upgrading is seamless. An older daemon with sessions, or a newer daemon, is left alone:
 *    the CLI says so with the remedy, the llxprt adapter falls back to llxprt's own path. One
 *    daemon per user stays guaranteed by the instance lock.
 */

/** The version a request asks for, or null when the header is not a version at all. */
export function requestedProtocol(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return 1;
  return /^[1-9][0-9]{0,5}$/.test(value) ? Number(value) : null;
}

export function protocolMismatch(version: number | null): SandboxdError {
  return new SandboxdError(
    'PROTOCOL_MISMATCH',
    `this daemon serves protocol ${PROTOCOL_VERSION}; the client speaks ${version === null ? 'an unreadable version' : `protocol ${version}`}`,
    {
      remedy:
        version !== null && version > PROTOCOL_VERSION
          ? 'Run `sandboxd restart` to start the newer installed version.'
          : 'Upgrade the program that embeds the older sandboxd client, or stop its sessions and run `sandboxd restart`.',
    },
  );
}
