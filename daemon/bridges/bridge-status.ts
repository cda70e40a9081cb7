import type { BridgeInfo, BridgeState } from '../../shared/contracts/bridges.js';
import { SandboxdError } from '../../shared/errors.js';
import type { Logger } from '../os/logger.js';

/**
 * The states a bridge moves through itself. `draining` is not one of them: it is what the status
 * calls a ready bridge that no session holds. The pool owns the lease count and the idle timer that
 * ends such a bridge; a bridge that stored `draining` would need every count change pushed into it,
 * and every readiness check (an acquire joining it, a plan asking a tunnel's VM) would have to
 * accept two states that mean the same thing to it.
 */
export type LifeState = Exclude<BridgeState, 'draining'>;

/** Which states each state may move to; a move not listed is a bug in the bridge. */
export type Transitions = Readonly<Record<LifeState, readonly LifeState[]>>;

/**
 * The relays' table (a directory relay, a relay container): a ready relay that stops by itself
 * is `failed` until a session asks for it again, and a restart may find one still starting.
 */
export const RELAY_TRANSITIONS: Transitions = {
  starting: ['ready', 'failed', 'restarting', 'stopped'],
  ready: ['restarting', 'failed', 'stopped'],
  restarting: ['ready', 'failed', 'restarting', 'stopped'],
  failed: ['restarting', 'stopped'],
  stopped: [],
};

export function allowed(table: Transitions, from: LifeState, to: LifeState): boolean {
  return table[from].includes(to);
}

/** The status fields of a `BridgeInfo` every bridge keeps alike. */
export type StatusFields = Pick<BridgeInfo, 'state' | 'refs' | 'restarts' | 'createdAt' | 'lastError'>;

/**
 * A bridge's state with its table, the one place it changes, and the bookkeeping `sandboxd tunnels
 * ls` shows beside it: restarts, the last error, when the bridge was made. `E` is what the bridge
 * keeps as its last error (a tunnel rejects waiting sessions with it).
 */
export class BridgeStatus<E extends Error = Error> {
  private current: LifeState = 'starting';
  private restarts = 0;
  private readonly createdAt = new Date().toISOString();
  /** Cleared only by the bridge (a ready tunnel forgets the failures that came before). */
  lastError: E | null = null;

  constructor(
    private readonly table: Transitions,
    private readonly logger: Logger,
  ) {}

  get state(): LifeState {
    return this.current;
  }

  /** Every move into `restarting` counts as a restart, whoever asked for it. */
  transition(to: LifeState, why: string): void {
    const from = this.current;
    if (!allowed(this.table, from, to)) {
      throw new SandboxdError('INTERNAL', `a bridge cannot move from ${from} to ${to} (${why})`);
    }
    if (to === 'restarting') this.restarts += 1;
    this.current = to;
    this.logger.info({ from, to, why }, 'bridge state');
  }

  fields(refs: number): StatusFields {
    return {
      state: this.current === 'ready' && refs === 0 ? 'draining' : this.current,
      refs,
      restarts: this.restarts,
      createdAt: this.createdAt,
      lastError: this.lastError?.message ?? null,
    };
  }
}
