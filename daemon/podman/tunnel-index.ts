import type { PodmanConnection } from './connections.js';
import type { PathKind } from './vm-queries.js';

/** What the index needs of a tunnel. */
export interface IndexedTunnel {
  readonly currentConnection: PodmanConnection;
  readonly ready: boolean;
  ask(paths: readonly string[]): Promise<Map<string, PathKind>>;
}

function sameLogin(a: PodmanConnection, b: PodmanConnection): boolean {
  return a.target.host === b.target.host && a.target.port === b.target.port && a.target.user === b.target.user;
}

/** The running tunnels by where they log in, so a plan can ask a VM over a connection already open. */
export class TunnelIndex {
  private readonly tunnels = new Set<IndexedTunnel>();

  add(tunnel: IndexedTunnel): void {
    this.tunnels.add(tunnel);
  }

  delete(tunnel: IndexedTunnel): void {
    this.tunnels.delete(tunnel);
  }

  /** A ready tunnel that logs in as this connection does (same user, host and port), or null. */
  readyFor(connection: PodmanConnection): IndexedTunnel | null {
    for (const tunnel of this.tunnels) if (tunnel.ready && sameLogin(tunnel.currentConnection, connection)) return tunnel;
    return null;
  }
}
