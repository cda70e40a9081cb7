import { promises as fs } from 'node:fs';
import { z } from 'zod';
import { writeFileAtomic } from '../atomic-file.js';
import type { Logger } from '../logger.js';
import type { TunnelRecord } from './tunnel.js';

const StateFile = z.object({
  version: z.literal(1),
  tunnels: z.array(
    z.object({ id: z.string(), pid: z.number().int().positive(), vmDir: z.string(), connection: z.string(), agentSocket: z.string() }),
  ),
});

/**
 * The state file (DESIGN §6 crash safety): which ssh processes this daemon runs. Written
 * atomically on every change, one write at a time, so a crash leaves a whole previous version.
 */
export class TunnelStore {
  private readonly records = new Map<string, TunnelRecord>();
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly statePath: string,
    private readonly logger: Logger,
  ) {}

  async load(): Promise<TunnelRecord[]> {
    let text: string;
    try {
      text = await fs.readFile(this.statePath, 'utf8');
    } catch {
      return [];
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const parsed = StateFile.safeParse(json);
    if (!parsed.success) {
      this.logger.warn({ statePath: this.statePath }, 'state file unreadable; ignoring it');
      return [];
    }
    return parsed.data.tunnels;
  }

  /** Starts this daemon's file empty, once what a previous one recorded has been reaped. */
  clear(): Promise<void> {
    this.records.clear();
    return this.write();
  }

  set(id: string, record: TunnelRecord | null): Promise<void> {
    if (record === null) this.records.delete(id);
    else this.records.set(id, record);
    return this.write();
  }

  private write(): Promise<void> {
    const body = JSON.stringify({ version: 1, tunnels: [...this.records.values()] }, null, 2);
    this.writing = this.writing
      .then(() => writeFileAtomic(this.statePath, body, 0o600))
      .catch((error: unknown) => {
        this.logger.error({ err: error }, 'cannot write the state file');
      });
    return this.writing;
  }
}

export interface OrphanDeps {
  /** The command line of a live pid, or null if it is gone. */
  commandLine(pid: number): Promise<string | null>;
  kill(pid: number, signal: NodeJS.Signals): void;
  sleep(ms: number): Promise<void>;
}

const ORPHAN_EXIT_WAIT_MS = 2_000;

/**
 * Kills the ssh processes a previous daemon left (after `kill -9`), but only a pid whose command
 * line is still our ssh for that VM dir: a reused pid belongs to someone else and is left alone.
 * The killed ssh closes its connection, and the remote script removes the VM socket.
 */
export async function reapOrphans(records: readonly TunnelRecord[], deps: OrphanDeps, logger: Logger): Promise<number> {
  let reaped = 0;
  for (const record of records) {
    const command = await deps.commandLine(record.pid);
    if (command === null || !command.includes('ssh') || !command.includes(record.vmDir)) continue;
    const log = logger.child({ tunnelId: record.id, pid: record.pid });
    log.warn('killing an ssh left by a previous daemon');
    deps.kill(record.pid, 'SIGTERM');
    const deadline = Date.now() + ORPHAN_EXIT_WAIT_MS;
    while ((await deps.commandLine(record.pid)) !== null && Date.now() < deadline) await deps.sleep(50);
    if ((await deps.commandLine(record.pid)) !== null) deps.kill(record.pid, 'SIGKILL');
    reaped += 1;
  }
  return reaped;
}
