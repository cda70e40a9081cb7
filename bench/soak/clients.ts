import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CLIENT_SCRIPT = fileURLToPath(new URL('./client.js', import.meta.url));
const STOP_TIMEOUT_MS = 15_000;

export interface ClientStats {
  cycles: number;
  /** What the planter wrote where the host's git would follow or run it. */
  planted: { planted: string; content: string }[];
  used: number;
  errors: Map<string, number>;
  acquireMs: number[];
}

export function emptyStats(): ClientStats {
  return { cycles: 0, planted: [], used: 0, errors: new Map(), acquireMs: [] };
}

/** The soak's client processes: spawned, killed by chaos, replaced, and stopped for checks. */
export class ClientPool {
  private readonly children = new Set<ChildProcess>();

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    private readonly stats: ClientStats,
  ) {}

  get pids(): number[] {
    return [...this.children].map((child) => child.pid ?? 0).filter((pid) => pid > 0);
  }

  /** `planter`: the one client that also plants files in its repository (`cwd`). */
  spawn(count: number, planter?: { cwd: string }): void {
    for (let i = 0; i < count; i += 1) {
      const options = planter === undefined ? { env: this.env } : { env: { ...this.env, SOAK_PLANT: '1' }, cwd: planter.cwd };
      const child = spawn(process.execPath, [CLIENT_SCRIPT], { ...options, stdio: ['ignore', 'pipe', 'ignore'] });
      this.children.add(child);
      let buffered = '';
      child.stdout.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) this.record(line);
      });
      child.once('exit', () => this.children.delete(child));
    }
  }

  /** SIGKILLs one client mid-lease (its session must be reaped) and starts a replacement. */
  killOne(): number | null {
    const victim = [...this.children][Math.floor(Math.random() * this.children.size)];
    if (victim?.pid === undefined) return null;
    victim.kill('SIGKILL');
    this.children.delete(victim);
    this.spawn(1);
    return victim.pid;
  }

  /** SIGTERM: each client finishes its cycle, releases, exits; stragglers are killed. */
  async stopAll(): Promise<void> {
    const exits = [...this.children].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) {
            resolve();
            return;
          }
          const timer = setTimeout(() => {
            child.kill('SIGKILL');
          }, STOP_TIMEOUT_MS);
          child.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          child.kill('SIGTERM');
        }),
    );
    await Promise.all(exits);
    this.children.clear();
  }

  private record(line: string): void {
    try {
      const cycle = JSON.parse(line) as { ok: boolean; acquireMs?: number; used?: boolean; code?: string; planted?: string; content?: string };
      if (cycle.planted !== undefined) {
        this.stats.planted.push({ planted: cycle.planted, content: cycle.content ?? '' });
        return;
      }
      this.stats.cycles += 1;
      if (cycle.ok) {
        this.stats.acquireMs.push(cycle.acquireMs ?? 0);
        if (cycle.used === true) this.stats.used += 1;
      } else {
        const code = cycle.code ?? 'UNEXPECTED';
        this.stats.errors.set(code, (this.stats.errors.get(code) ?? 0) + 1);
      }
    } catch {
      // a line cut by a kill
    }
  }
}
