import path from 'node:path';
import type { Logger } from '../../os/logger.js';
import type { UpstreamGate } from '../bounds.js';
import { newEndpointDirName } from '../agent-relay.js';
import { SessionEndpoint } from '../session-endpoint.js';
import type { Generation } from './generation.js';

/** Session directory names in the VM: 64 random bits, in hex (the remote script accepts no other). */
const SLOT_NAME = /^[0-9a-f]{16}$/;

/**
 * One session's socket through a tunnel: a bounded listener in a daemon-private host directory (the
 * same code as the local relay's, so the session's bounds hold through the tunnel), and the
 * directory of the same name in the VM where sshd binds the socket the session's container mounts.
 */
export class TunnelSlot {
  /** The generation it is published on (or being published on), and when that is done. */
  published: { generation: Generation; done: Promise<void> } | null = null;
  /** Handed to a session (the spare is not, yet). */
  assigned = false;

  constructor(
    readonly name: string,
    readonly endpoint: SessionEndpoint,
  ) {}
}

export interface TunnelSlotsOptions {
  /** Daemon-private (0700): where each slot's host listener is (ssh connects there, as this user). */
  hostDir: string;
  upstream: string;
  /** Each slot's socket names itself to the upstream first (session-endpoint.ts). */
  announce?: boolean;
  gate: UpstreamGate;
  monotonic(): number;
  logger: Logger;
  onUpstreamError(error: Error): void;
  /** The generation to publish on, once the tunnel is ready; rejects when it cannot be. */
  ready(): Promise<Generation>;
  /** The ready generation now, or null. */
  current(): Generation | null;
}

/**
 * The sessions' sockets of one tunnel. Each is published on every generation of the tunnel (a new
 * ssh forwards them all again, at the same paths: running containers mount those directories), and
 * one spare is kept published so a warm acquire does not wait for the VM's round trips.
 */
export class TunnelSlots {
  private readonly slots = new Set<TunnelSlot>();
  private spare: Promise<TunnelSlot> | null = null;
  /**
   * The next spare's name, its directory asked for in the VM along with the last publish's final
   * command (Generation.prepare): a refill then costs the VM's round trips of the forward and `p`.
   */
  private premade: string | null = null;
  /** Forwards being cancelled and directories removed for sessions that ended (`close` does not wait). */
  private readonly removing = new Set<Promise<void>>();
  /** Connections refused on slots already closed, so the count only grows. */
  private refusedBefore = 0;
  private stopped = false;
  /**
   * Slots whose session ended while no generation could remove their directory in the VM (or its
   * removal failed): the next sweep or ready generation does. Nothing else is removed there: a
   * directory the tunnel does not know yet may be a recorded session's, about to be served again.
   */
  private readonly toRemove = new Set<string>();

  constructor(private readonly options: TunnelSlotsOptions) {}

  /** Slots that belong to sessions (the spare is not one). */
  get inUse(): number {
    let count = 0;
    for (const slot of this.slots) if (slot.assigned) count += 1;
    return count;
  }

  get refused(): number {
    let refused = this.refusedBefore;
    for (const slot of this.slots) refused += slot.endpoint.refused;
    return refused;
  }

  /**
   * A session's slot, published: the spare when there is one (and a new spare is made), or
   * `name` when a recorded one is served again.
   */
  async open(name?: string): Promise<TunnelSlot> {
    const slot = await this.take(name);
    slot.assigned = true;
    return slot;
  }

  private async take(name?: string): Promise<TunnelSlot> {
    if (name !== undefined) return this.make(name);
    const spare = this.spare;
    this.spare = null;
    if (spare === null) {
      // No spare (a cold start): this session's commands reach the VM first, the spare's after.
      const made = this.make(this.freshName());
      made.then(() => {
        this.refill();
      }, () => undefined);
      return made;
    }
    this.refill();
    return (await spare.catch(() => null)) ?? this.make(this.freshName());
  }

  /**
   * The session ended: its socket stops at once with every connection on it, and then it returns;
   * its forward is cancelled and its directory in the VM removed right after, unless `keep` (the
   * daemon stops, and the next one publishes it again). The host end is what revokes the agent: a
   * connection to the VM socket meanwhile reaches no listener. A removal that fails is retried by
   * the next sweep or generation.
   */
  async close(slot: TunnelSlot, keep: boolean): Promise<void> {
    if (!this.slots.delete(slot)) return;
    this.refusedBefore += slot.endpoint.refused;
    await slot.endpoint.close();
    if (keep) return;
    const generation = this.options.current();
    if (generation === null || slot.published?.generation !== generation) {
      this.toRemove.add(slot.name);
      return;
    }
    const removal = generation.unpublish({ name: slot.name, hostSocket: slot.endpoint.socketPath }).catch((error: unknown) => {
      this.toRemove.add(slot.name);
      this.options.logger.warn({ err: error, slot: slot.name }, 'cannot remove a session directory in the VM; the next sweep does');
    });
    this.removing.add(removal);
    void removal.finally(() => this.removing.delete(removal));
  }

  /** A generation became ready: directories of sessions that ended meanwhile go, and every slot is published on it. */
  async publishAll(generation: Generation): Promise<void> {
    await Promise.all([
      this.removeEnded(generation),
      ...[...this.slots].map((slot) => this.publishOn(slot, generation).catch((error: unknown) => {
        this.options.logger.error({ err: error, slot: slot.name }, 'cannot publish a session socket again');
      })),
    ]);
  }

  /** Publishes anew the slots whose socket in the VM is not the one sshd bound; answers their names. */
  async check(generation: Generation): Promise<string[]> {
    await this.removeEnded(generation);
    const replaced = new Set(await generation.replaced());
    const slots = [...this.slots].filter((slot) => replaced.has(slot.name) && slot.published?.generation === generation);
    await Promise.all(slots.map((slot) => this.publishOn(slot, generation, true)));
    return slots.map((slot) => slot.name);
  }

  /**
   * Every slot's socket stops (the spare too), once the removals under way are done. The VM side is
   * the halting generation's to clean; when the sessions' directories stay there (`keeping`, the
   * daemon stops), this one removes the spare's and the next spare's, which no session holds.
   */
  async closeAll(keeping: Generation | null = null): Promise<void> {
    this.stopped = true;
    const spare = this.spare;
    this.spare = null;
    const spareSlot = (await spare?.catch(() => null)) ?? null;
    const unheld = [spareSlot?.name ?? null, this.premade].filter((name) => name !== null);
    this.premade = null;
    await Promise.all(this.removing);
    const slots = [...this.slots];
    this.slots.clear();
    await Promise.all([
      ...slots.map((slot) => slot.endpoint.close()),
      ...(keeping === null ? [] : unheld.map((name) => keeping.remove(name).catch(() => undefined))),
    ]);
  }

  /** Directories of sessions that ended while they could not be removed go now. */
  private async removeEnded(generation: Generation): Promise<void> {
    const gone = [...this.toRemove];
    this.toRemove.clear();
    await Promise.all(gone.map((name) => generation.remove(name).catch(() => {
      this.toRemove.add(name);
    })));
  }

  /**
   * A name for a new generation to make first (Generation.prepare, queued behind its script): the
   * premade one (made again: it may have been made on an earlier generation, and `m` finds it), or
   * a new one, which becomes the premade.
   */
  forNextGeneration(): string[] {
    if (this.stopped) return [];
    this.premade ??= newEndpointDirName();
    return [this.premade];
  }

  /** The next spare's name, its directory asked for along with a publish's last command; null: one is. */
  private nextPremade(): string | null {
    if (this.stopped || this.premade !== null) return null;
    this.premade = newEndpointDirName();
    return this.premade;
  }

  /** The premade name when there is one, else a new one. */
  private freshName(): string {
    const name = this.premade ?? newEndpointDirName();
    this.premade = null;
    return name;
  }

  /** At most one spare: concurrent acquires each take the one being made, or make their own. */
  private refill(): void {
    if (this.stopped || this.spare !== null) return;
    const made = this.make(this.freshName());
    this.spare = made;
    made.catch(() => {
      if (this.spare === made) this.spare = null;
    });
  }

  private async make(name: string): Promise<TunnelSlot> {
    if (!SLOT_NAME.test(name)) throw new Error(`not a session directory name: ${name}`);
    const endpoint = new SessionEndpoint({
      socketPath: path.join(this.options.hostDir, `${name}.sock`),
      upstream: this.options.upstream,
      announce: this.options.announce,
      gate: this.options.gate,
      monotonic: () => this.options.monotonic(),
      // Only this user's ssh connects to it.
      umask: 0o177,
      logger: this.options.logger,
      onUpstreamError: (error) => {
        this.options.onUpstreamError(error);
      },
    });
    await endpoint.listen();
    const slot = new TunnelSlot(name, endpoint);
    this.slots.add(slot);
    try {
      await this.publishOn(slot, await this.options.ready());
      if (this.stopped) throw new Error('the tunnel stopped');
      return slot;
    } catch (error) {
      this.slots.delete(slot);
      await endpoint.close();
      throw error;
    }
  }

  /** Publishes a slot on a generation once (`again`: anew, after its socket was found replaced). */
  private publishOn(slot: TunnelSlot, generation: Generation, again = false): Promise<void> {
    const published = slot.published;
    if (!again && published?.generation === generation) return published.done;
    const done = generation.publish({ name: slot.name, hostSocket: slot.endpoint.socketPath }, { again, next: () => this.nextPremade() });
    slot.published = { generation, done };
    done.catch(() => {
      if (slot.published?.done === done) slot.published = null;
    });
    return done;
  }
}
