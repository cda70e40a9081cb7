import * as z from 'zod/mini';
import { writeFileAtomic } from '../../os/files.js';
import { readRecordFile } from '../../os/record-file.js';
import type { Logger } from '../../os/logger.js';
import { REMOTE_STUB } from '../../podman/ssh-command.js';
import type { TunnelRecord } from './tunnel.js';

/**
 * What `TunnelNames` produces: `/tmp/sandboxd-<16 hex>/<32 hex>` (a 10-hex root from daemons
 * before roots were random, a 12-hex dir from daemons before the names became secret, whose
 * orphans an upgraded daemon still reaps). A record naming anything else was not written by
 * sandboxd, and nothing it names is touched.
 */
const VM_DIR = /^\/tmp\/sandboxd-(?:[0-9a-f]{10}|[0-9a-f]{16})\/(?:[0-9a-f]{12}|[0-9a-f]{32})$/;

/**
 * A tunnel's ssh is a ControlMaster running the fixed stub, no VM path on its argv; one of an
 * earlier release bound its socket beside the tunnel root (`-R <root>.<nonce>.sock:…`), or named
 * the dir in its remote command.
 */
function belongsTo(argv: readonly string[], vmDir: string): boolean {
  if (argv.includes(REMOTE_STUB) && argv.includes('ControlMaster=yes')) return true;
  const spec = argv.includes('-R') ? argv[argv.indexOf('-R') + 1] : undefined;
  return spec?.startsWith(`${vmDir.slice(0, vmDir.lastIndexOf('/'))}.`) === true || argv.some((arg) => arg.includes(vmDir));
}

const TunnelRecordSchema = z
  .strictObject({
    id: z.string().check(z.regex(/^tun_[0-9a-f]{12}$/)),
    // pid 1 is init; 0 and negatives would signal process groups.
    pid: z.int().check(z.minimum(2), z.maximum(2 ** 31 - 1)),
    vmDir: z.string().check(z.regex(VM_DIR)),
    connection: z.string().check(z.minLength(1), z.maxLength(200)),
    agentSocket: z.string().check(z.startsWith('/'), z.maxLength(4096)),
    argv: z.array(z.string().check(z.maxLength(65_536))).check(z.minLength(2), z.maxLength(200)),
  })
  .check(z.refine((record) => belongsTo(record.argv, record.vmDir), 'argv does not belong to its vmDir'));

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

  load(): Promise<TunnelRecord[]> {
    return readRecordFile(this.statePath, 'tunnels', 1024, TunnelRecordSchema, this.logger);
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

/** The live command line, as `commandLine` reports it (argv joined by spaces), is exactly the recorded argv. */
function runs(command: string | null, argv: readonly string[]): boolean {
  return command !== null && command.trimEnd() === argv.join(' ');
}

/**
 * Kills the ssh processes a previous daemon left (after `kill -9`), but only a pid whose command
 * line is still exactly the recorded ssh: a reused pid belongs to someone else and is left alone.
 * The killed ssh closes its connection, and the remote script removes the VM socket.
 */
export async function reapOrphans(records: readonly TunnelRecord[], deps: OrphanDeps, logger: Logger): Promise<number> {
  let reaped = 0;
  for (const record of records) {
    if (!runs(await deps.commandLine(record.pid), record.argv)) continue;
    const log = logger.child({ tunnelId: record.id, pid: record.pid });
    log.warn('killing an ssh left by a previous daemon');
    deps.kill(record.pid, 'SIGTERM');
    // Monotonic: a wall clock set back meanwhile would stretch the wait by as much.
    const deadline = performance.now() + ORPHAN_EXIT_WAIT_MS;
    while (runs(await deps.commandLine(record.pid), record.argv) && performance.now() < deadline) await deps.sleep(50);
    if (runs(await deps.commandLine(record.pid), record.argv)) deps.kill(record.pid, 'SIGKILL');
    reaped += 1;
  }
  return reaped;
}
