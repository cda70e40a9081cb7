import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import type { Mount } from '../../shared/contracts/plan.js';
import type { Logger } from '../os/logger.js';
import type { KeptEndpoint } from './endpoint-records.js';

/** Where the agent directory appears in every container; the socket inside it is `agent.sock`. */
export const CONTAINER_AGENT_DIR = '/run/sandboxd/ssh';

/** One shared agent bridge (relay or tunnel). The pool owns its lifetime; sessions hold leases. */
export interface Bridge {
  readonly id: string;
  /** Kicks the bridge off; called once, right after construction. */
  start(): void;
  /** Resolves once the bridge serves the agent; rejects with a SandboxdError when it cannot. */
  whenReady(): Promise<void>;
  /** Re-creates the underlying listener or process; sessions keep their mounts. */
  restart(): Promise<void>;
  /** The only way the bridge's listener or child process is stopped. */
  halt(): Promise<void>;
  /**
   * Looks whether the socket the bridge serves is still the one it made, and re-creates it when
   * not (the daemon's sweep calls it); bridges that watch their socket otherwise have none.
   */
  check?(): Promise<void>;
  describe(refs: number): BridgeInfo;
}

export interface Lease {
  readonly bridgeId: string;
  /** Idempotent. */
  release(): void;
  /** Connections a bound refused on the session's own socket so far (none for a shared bridge). */
  refused?(): number;
  /** How a next daemon serves the session's socket again at the same path (none: it cannot). */
  kept?(): KeptEndpoint;
}

/** A bridge that serves `agentSocket` from a directory the container can mount. */
export interface ServedAgent {
  lease: Lease;
  kind: 'mount' | 'tunnel' | 'desktop';
  /**
   * Host path (relay) or VM path (tunnel) of the session's own directory to mount; null when
   * `flags` carry the mount (its relay container's volume).
   */
  mountSource: string | null;
  /** The session's own socket on this host (the relay's, or a tunnel's host end); none for a Docker relay. */
  endpointPath?: string;
  relabel: Mount['relabel'];
  flags: string[];
  warnings: string[];
}

/** Why no bridge serves the socket, and what the user can do about it. */
export interface Unavailable {
  unavailable: string;
  remedy?: string;
  /** The error a session that insists on the agent gets (default SSH_BRIDGE_UNSUPPORTED). */
  code?: 'AGENT_SOCKET_DENIED';
}

/**
 * The session's agent, one of its extra host sockets, or its git credential socket (which only
 * bridges with a socket of the session's own on this host can carry).
 */
export type ServeRole = 'agent' | 'socket' | 'credentials';

export interface EndpointLeaseParts {
  refused(): number;
  /** How a next daemon serves the same path again. */
  kept(): KeptEndpoint;
  /** Closes the session's socket: it stops listening and its connections end before this first awaits. */
  close(): Promise<void>;
  logger: Logger;
}

/**
 * A session's lease on its own socket: releasing it closes that socket (its connections end at
 * once) and gives the bridge's lease back.
 */
export function endpointLease(bridge: Lease, parts: EndpointLeaseParts): Lease {
  let released = false;
  return {
    bridgeId: bridge.bridgeId,
    refused: () => parts.refused(),
    kept: () => parts.kept(),
    release: () => {
      if (released) return;
      released = true;
      // The socket stops listening and its connections end before this returns; the rest (its
      // directory) follows.
      void parts.close().catch((error: unknown) => {
        parts.logger.error({ err: error, bridgeId: bridge.bridgeId }, 'cannot close a session socket');
      });
      bridge.release();
    },
  };
}
