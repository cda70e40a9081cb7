import type { BridgeInfo } from '../../shared/contracts/bridges.js';
import type { Logger } from '../os/logger.js';
import type { Bridge, Lease } from './bridge.js';

interface Entry<B extends Bridge> {
  readonly key: string;
  readonly bridge: B;
  refs: number;
  idleTimer: NodeJS.Timeout | null;
}

export interface BridgePoolOptions {
  /** How long a bridge with no sessions is kept so a quick next session reuses it. */
  idleMs: number;
  logger: Logger;
}

/**
 * Shares bridges by key (DESIGN §5–6): the first session creates one, later sessions join it, and
 * the last release starts an idle grace period before the bridge is halted.
 */
export class BridgePool<B extends Bridge = Bridge> {
  private readonly entries = new Map<string, Entry<B>>();

  constructor(private readonly options: BridgePoolOptions) {}

  async acquire(key: string, create: () => B): Promise<{ lease: Lease; bridge: B }> {
    let entry = this.entries.get(key);
    if (entry === undefined) {
      const bridge = create();
      entry = { key, bridge, refs: 0, idleTimer: null };
      this.entries.set(key, entry);
      bridge.start();
    }
    const held = entry;
    held.refs += 1;
    this.clearIdle(held);
    try {
      await held.bridge.whenReady();
    } catch (error) {
      // A bridge that never became ready is not kept idle: the next session starts afresh.
      held.refs = Math.max(0, held.refs - 1);
      if (held.refs === 0) await this.haltEntry(held);
      throw error;
    }
    let released = false;
    const lease: Lease = {
      bridgeId: held.bridge.id,
      release: () => {
        if (released) return;
        released = true;
        this.drop(held);
      },
    };
    return { lease, bridge: held.bridge };
  }

  bridges(): B[] {
    return [...this.entries.values()].map((entry) => entry.bridge);
  }

  list(): BridgeInfo[] {
    return [...this.entries.values()].map((entry) => entry.bridge.describe(entry.refs));
  }

  get size(): number {
    return this.entries.size;
  }

  find(id: string): BridgeInfo | null {
    const entry = this.byId(id);
    return entry === undefined ? null : entry.bridge.describe(entry.refs);
  }

  async restart(id: string): Promise<BridgeInfo | null> {
    const entry = this.byId(id);
    if (entry === undefined) return null;
    await entry.bridge.restart();
    return entry.bridge.describe(entry.refs);
  }

  /** Halts a bridge now, whatever holds it; the sessions using it lose their agent. */
  async remove(id: string): Promise<boolean> {
    const entry = this.byId(id);
    if (entry === undefined) return false;
    await this.haltEntry(entry);
    return true;
  }

  /** Every bridge looks at its socket; one that cannot be re-created is logged, not thrown. */
  async check(): Promise<void> {
    await Promise.all(
      [...this.entries.values()].map(async (entry) => {
        try {
          await entry.bridge.check?.();
        } catch (error) {
          this.options.logger.error({ err: error, bridgeId: entry.bridge.id }, 'bridge check failed');
        }
      }),
    );
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.entries.values()].map((entry) => this.haltEntry(entry)));
  }

  private byId(id: string): Entry<B> | undefined {
    return [...this.entries.values()].find((entry) => entry.bridge.id === id);
  }

  private drop(entry: Entry<B>): void {
    entry.refs = Math.max(0, entry.refs - 1);
    if (entry.refs > 0 || this.entries.get(entry.key) !== entry) return;
    this.clearIdle(entry);
    entry.idleTimer = setTimeout(() => {
      entry.idleTimer = null;
      if (entry.refs === 0) {
        this.options.logger.info({ bridgeId: entry.bridge.id }, 'bridge idle; halting');
        void this.haltEntry(entry);
      }
    }, this.options.idleMs);
    entry.idleTimer.unref();
  }

  private clearIdle(entry: Entry<B>): void {
    if (entry.idleTimer !== null) clearTimeout(entry.idleTimer);
    entry.idleTimer = null;
  }

  private async haltEntry(entry: Entry<B>): Promise<void> {
    this.clearIdle(entry);
    if (this.entries.get(entry.key) === entry) this.entries.delete(entry.key);
    await entry.bridge.halt();
  }
}
