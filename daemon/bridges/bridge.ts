import type { BridgeInfo } from '../../shared/contracts/bridges.js';

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
}
