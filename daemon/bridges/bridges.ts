import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import type { BridgePool } from './bridge-pool.js';

/** One view over the relay and tunnel pools for status, `tunnels ls`, restart and rm. */
export class Bridges {
  private readonly pools: readonly BridgePool[];

  constructor(...pools: BridgePool[]) {
    this.pools = pools;
  }

  get size(): number {
    return this.pools.reduce((sum, pool) => sum + pool.size, 0);
  }

  list(): BridgeInfo[] {
    return this.pools.flatMap((pool) => pool.list());
  }

  async restart(id: string): Promise<BridgeInfo | null> {
    for (const pool of this.pools) {
      const info = await pool.restart(id);
      if (info !== null) return info;
    }
    return null;
  }

  async remove(id: string): Promise<boolean> {
    for (const pool of this.pools) if (await pool.remove(id)) return true;
    return false;
  }

  async check(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.check()));
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.closeAll()));
  }
}
