import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { allowed, BridgeStatus, RELAY_TRANSITIONS, type LifeState, type Transitions } from '../../daemon/bridges/bridge-status.js';
import { TUNNEL_TRANSITIONS } from '../../daemon/bridges/tunnels/tunnel-states.js';

const STATES: readonly LifeState[] = ['starting', 'ready', 'restarting', 'failed', 'stopped'];

/** The moves a bridge's status takes before `to`, starting from `starting`, by the table itself. */
function pathTo(table: Transitions, to: LifeState): LifeState[] {
  const seen = new Map<LifeState, LifeState[]>([['starting', []]]);
  const queue: LifeState[] = ['starting'];
  for (let state = queue.shift(); state !== undefined; state = queue.shift()) {
    for (const next of table[state]) {
      if (seen.has(next)) continue;
      seen.set(next, [...(seen.get(state) ?? []), next]);
      queue.push(next);
    }
  }
  const found = seen.get(to);
  if (found === undefined) throw new Error(`${to} cannot be reached`);
  return found;
}

function statusIn(table: Transitions, state: LifeState) {
  const logs: { msg: string; from?: string; to?: string; why?: string; tunnelId?: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) }).child({ tunnelId: 'tun_abcdef123456' });
  const status = new BridgeStatus(table, logger);
  for (const step of pathTo(table, state)) status.transition(step, 'getting there');
  logs.length = 0;
  return { status, logs };
}

const TABLES: [string, Transitions, [LifeState, LifeState][]][] = [
  ['tunnel', TUNNEL_TRANSITIONS, [['starting', 'ready'], ['starting', 'failed'], ['starting', 'restarting'], ['starting', 'stopped'], ['ready', 'restarting'], ['ready', 'stopped'], ['restarting', 'ready'], ['restarting', 'restarting'], ['restarting', 'stopped'], ['failed', 'restarting'], ['failed', 'stopped']]],
  ['relay', RELAY_TRANSITIONS, [['starting', 'ready'], ['starting', 'failed'], ['starting', 'restarting'], ['starting', 'stopped'], ['ready', 'restarting'], ['ready', 'failed'], ['ready', 'stopped'], ['restarting', 'ready'], ['restarting', 'failed'], ['restarting', 'restarting'], ['restarting', 'stopped'], ['failed', 'restarting'], ['failed', 'stopped']]],
];

describe.each(TABLES)('the %s state table', (_name, table, moves) => {
  const pairs = STATES.flatMap((from) => STATES.map((to): [LifeState, LifeState] => [from, to]));
  const isAllowed = ([from, to]: [LifeState, LifeState]) => moves.some(([a, b]) => a === from && b === to);

  it('allows exactly the moves listed here', () => {
    expect(pairs.filter(([from, to]) => allowed(table, from, to))).toEqual(pairs.filter(isAllowed));
  });

  it.each(pairs.filter(isAllowed))('%s → %s changes the state and logs it with the bridge id', (from, to) => {
    const { status, logs } = statusIn(table, from);
    const before = status.fields(1).restarts;
    status.transition(to, 'because');
    expect(status.state).toBe(to);
    expect(status.fields(1).restarts).toBe(before + (to === 'restarting' ? 1 : 0));
    expect(logs).toEqual([expect.objectContaining({ msg: 'bridge state', from, to, why: 'because', tunnelId: 'tun_abcdef123456' })]);
  });

  it.each(pairs.filter((pair) => !isAllowed(pair)))('%s → %s is a bug: it throws and changes nothing', (from, to) => {
    const { status, logs } = statusIn(table, from);
    expect(() => {
      status.transition(to, 'because');
    }).toThrow(expect.objectContaining({ code: 'INTERNAL', message: `a bridge cannot move from ${from} to ${to} (because)` }));
    expect(status.state).toBe(from);
    expect(logs).toEqual([]);
  });

  it('nothing leaves stopped, and nothing goes back to starting', () => {
    expect(table.stopped).toEqual([]);
    expect(STATES.filter((from) => allowed(table, from, 'starting'))).toEqual([]);
  });
});

describe('BridgeStatus fields', () => {
  it('calls a ready bridge no session holds draining, and says the last error by its message', () => {
    const { status } = statusIn(RELAY_TRANSITIONS, 'ready');
    expect(status.fields(0).state).toBe('draining');
    expect(status.fields(2)).toMatchObject({ state: 'ready', refs: 2, restarts: 0, lastError: null });
    status.lastError = new Error('agent went away');
    status.transition('restarting', 'asked');
    expect(status.fields(0)).toMatchObject({ state: 'restarting', refs: 0, restarts: 1, lastError: 'agent went away' });
    expect(Date.parse(status.fields(0).createdAt)).not.toBeNaN();
  });
});
