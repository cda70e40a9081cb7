import type { Transitions } from '../bridge-status.js';

/**
 * How a tunnel's state moves. A cold start that fails is `failed` and waits for a restart; once a
 * tunnel has been ready it never fails by itself: a generation that dies puts it back into
 * `restarting`, which retries with backoff (again and again, each retry a move to `restarting`)
 * until it is ready or halted. A restart may come in any state but `stopped`, which is final.
 */
export const TUNNEL_TRANSITIONS: Transitions = {
  starting: ['ready', 'failed', 'restarting', 'stopped'],
  ready: ['restarting', 'stopped'],
  restarting: ['ready', 'restarting', 'stopped'],
  failed: ['restarting', 'stopped'],
  stopped: [],
};
