import type { Platform, SandboxdPaths } from '../../shared/paths.js';
import type { TunnelRecord } from '../bridges/tunnels/tunnel.js';
import type { DaemonIdentity } from '../containers/container-store.js';
import type { Logger } from '../os/logger.js';
import type { PrivacyPrincipal } from '../os/privacy.js';
import type { ProcessProbe } from '../os/process-identity.js';
import type { DaemonEdges } from './edges.js';

export interface DaemonSettings {
  leaseTtlMs: number;
  sweepIntervalMs: number;
  bridgeIdleMs: number;
  maxSessions: number;
  /** Open connections served at once; null derives it from the soft fd limit. */
  maxConnections: number | null;
  /** A request (headers and body) must arrive within this, or it is answered REQUEST_TIMEOUT. */
  requestTimeoutMs: number;
}

export const DEFAULT_SETTINGS: DaemonSettings = {
  leaseTtlMs: 30_000,
  // A dead client is reaped within this interval.
  sweepIntervalMs: 2_000,
  bridgeIdleMs: 60_000,
  maxSessions: 1024,
  maxConnections: null,
  requestTimeoutMs: 10_000,
};

/** What the composition root is given: the edges, this daemon's place and identity, and its hooks. */
export interface DaemonDeps {
  edges: DaemonEdges;
  platform: Platform;
  paths: SandboxdPaths;
  hostHome: string;
  probe: ProcessProbe;
  logger: Logger;
  logPath: string | null;
  settings: DaemonSettings;
  uid: number;
  /** The user's primary gid (default: this process's): the group a mapped container user writes with. */
  gid?: number;
  /** This daemon's pid and start time, as its container records name it. */
  identity: DaemonIdentity;
  /** Whether a daemon of an earlier layout answers: what it may own is left alone. */
  strayAnswers(): Promise<boolean>;
  requestShutdown(reason: string): void;
  /** Persists a tunnel's running ssh (the state file); null once it stopped. */
  onTunnelChild(id: string, record: TunnelRecord | null): void;
  /** Who macOS privacy judges (the binary to grant); by default this node, started from a terminal. */
  privacy?: { principal: PrivacyPrincipal; readable?: (dir: string) => Promise<boolean> };
}
