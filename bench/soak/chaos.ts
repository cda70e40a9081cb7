import { getStatus, listTunnels } from '../../client/index.js';
import type { Sshd } from '../../test/lab/sshd.js';
import type { ClientPool } from './clients.js';

export interface ChaosStats {
  actions: Map<string, number>;
  /** ms from a fault until every tunnel was ready again. */
  healMs: number[];
  /** ms from kill -9 of the daemon until a daemon answered again (auto-started by a client). */
  recoveryMs: number[];
  /** Faults after which the system did not heal within the bound. */
  unhealed: string[];
}

export function emptyChaos(): ChaosStats {
  return { actions: new Map(), healMs: [], recoveryMs: [], unhealed: [] };
}

const HEAL_BOUND_MS = 30_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface ChaosDeps {
  env: NodeJS.ProcessEnv;
  sshd: Sshd;
  clients: ClientPool;
  daemonPid(): number | null;
}

async function timeUntil(probe: () => Promise<boolean>): Promise<number | null> {
  const start = performance.now();
  while (performance.now() - start < HEAL_BOUND_MS) {
    if (await probe().catch(() => false)) return performance.now() - start;
    await sleep(100);
  }
  return null;
}

async function allTunnelsReady(env: NodeJS.ProcessEnv): Promise<boolean> {
  return (await listTunnels(env)).every((tunnel) => tunnel.state === 'ready');
}

export type Action = (deps: ChaosDeps, stats: ChaosStats) => Promise<void>;

const healed = async (name: string, deps: ChaosDeps, stats: ChaosStats): Promise<void> => {
  const ms = await timeUntil(() => allTunnelsReady(deps.env));
  if (ms === null) stats.unhealed.push(name);
  else stats.healMs.push(ms);
};

/** Each fault the issue names, as the operating system would deliver it. */
export const TUNNEL_FAULTS: Record<string, Action> = {
  'kill tunnel ssh': async (deps, stats) => {
    const [tunnel] = await listTunnels(deps.env);
    if (tunnel?.pid === null || tunnel === undefined) return;
    process.kill(tunnel.pid, 'SIGKILL');
    await healed('kill tunnel ssh', deps, stats);
  },
  'SIGKILL a client mid-lease': (deps) => {
    deps.clients.killOne();
    return Promise.resolve();
  },
  'restart sshd (the VM)': async (deps, stats) => {
    await deps.sshd.stop();
    await sleep(500);
    await deps.sshd.start();
    await healed('restart sshd', deps, stats);
  },
};

export const DAEMON_FAULTS: Record<string, Action> = {
  'SIGSTOP the daemon 3 s': async (deps) => {
    const pid = deps.daemonPid();
    if (pid === null) return;
    process.kill(pid, 'SIGSTOP');
    await sleep(3_000);
    process.kill(pid, 'SIGCONT');
  },
  'SIGKILL the daemon': async (deps, stats) => {
    const pid = deps.daemonPid();
    if (pid === null) return;
    process.kill(pid, 'SIGKILL');
    const ms = await timeUntil(async () => (await getStatus(deps.env)).pid !== pid);
    if (ms === null) stats.unhealed.push('SIGKILL the daemon');
    else stats.recoveryMs.push(ms);
  },
};

/** Random faults from `faults`, one every `intervalMs`, until `untilMs` (performance.now()). */
export async function runChaos(faults: Record<string, Action>, deps: ChaosDeps, stats: ChaosStats, untilMs: number, intervalMs: number): Promise<void> {
  const names = Object.keys(faults);
  while (performance.now() < untilMs) {
    await sleep(intervalMs * (0.5 + Math.random()));
    const name = names[Math.floor(Math.random() * names.length)] ?? '';
    stats.actions.set(name, (stats.actions.get(name) ?? 0) + 1);
    await faults[name]?.(deps, stats);
  }
}
