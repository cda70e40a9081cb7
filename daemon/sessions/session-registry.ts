import { SandboxdError } from '../../shared/errors.js';
import type { SessionInfo } from '../../shared/contracts/sessions.js';
import type { Lease } from '../bridges/bridge.js';
import type { KeptSession } from '../bridges/endpoint-records.js';
import type { Logger } from '../os/logger.js';
import type { Clock } from '../os/clock.js';
import { sameProcess, type ProcessProbe } from '../os/process-identity.js';

export type { Clock } from '../os/clock.js';

interface SessionRecord {
  /** As acquired; `lastHeartbeatAt` comes from `lastHeartbeat` (infoOf). */
  info: SessionInfo;
  clientStartTime: string | null;
  /** Monotonic: the lease runs from here. */
  lastHeartbeat: number;
  /** Wall time of the same heartbeat, only shown (`lastHeartbeatAt`). */
  lastHeartbeatWall: number;
  /** The client was stopped (Ctrl-Z) at the last sweep: said once per stop. */
  clientStopped: boolean;
  leases: Lease[];
}

export interface SessionRegistryOptions {
  clock: Clock;
  probe: ProcessProbe;
  leaseTtlMs: number;
  /** How often sweep() is meant to run; a much longer gap means the daemon itself was stalled. */
  sweepIntervalMs: number;
  maxSessions: number;
  logger: Logger;
  /** Told after a session started. */
  onAdd?: (info: SessionInfo) => void;
  /**
   * Told after a session ended, with why (its container goes or stays by the reason). The promise
   * of a container's removal keeps the session listed until the container is gone.
   */
  onEnd?: (info: SessionInfo, reason: EndReason) => Promise<unknown> | undefined;
  /** Told when a sweep learned the start time of a client acquired without it (macOS). */
  onStartTime?: (info: SessionInfo, startTime: string) => void;
}

/** A sweep this many intervals after the previous one means the daemon was stopped or asleep. */
const STALL_FACTOR = 3;

/** `removed`: the user ran `sandboxd sessions rm`; `git`: its sandbox's git dir exceeded a bound. */
export type EndReason = 'released' | 'client-exited' | 'lease-expired' | 'removed' | 'shutdown' | 'git';

/**
 * Leases (DESIGN §5). A session ends when released, when its client pid is gone (or is another
 * process now), or when heartbeats stop for longer than the TTL; ending releases its bridges.
 */
export class SessionRegistry {
  private readonly sessions = new Map<string, SessionRecord>();
  /** Ended sessions whose container is still being removed: listed, never renewed or heartbeaten. */
  private readonly ending = new Map<string, SessionRecord>();
  /**
   * From construction, not from the first sweep: a daemon stopped before it ever swept (a laptop
   * asleep right after the start) would otherwise expire every lease at once on waking.
   */
  private lastSweepAt: number;
  /** After a stall, leases of live clients do not expire before this. */
  private graceUntil = 0;

  constructor(private readonly options: SessionRegistryOptions) {
    this.lastSweepAt = options.clock.monotonic();
  }

  get size(): number {
    return this.sessions.size;
  }

  assertCapacity(): void {
    if (this.sessions.size >= this.options.maxSessions) {
      throw new SandboxdError('SESSION_LIMIT', `${this.sessions.size} sessions are open, the limit is ${this.options.maxSessions}`);
    }
  }

  /** `acquireMs`: how long its plan took, logged with it (a slow acquire is told apart in the log). */
  add(info: SessionInfo, clientStartTime: string | null, leases: Lease[], acquireMs?: number): void {
    this.assertCapacity();
    const { clock } = this.options;
    this.sessions.set(info.id, { info, clientStartTime, lastHeartbeat: clock.monotonic(), lastHeartbeatWall: clock.now(), clientStopped: false, leases });
    this.log(info.id).info({ clientPid: info.clientPid, engine: info.engine, ssh: info.ssh.status, ms: acquireMs }, 'session acquired');
    this.options.onAdd?.(info);
  }

  heartbeat(id: string): SessionInfo {
    const record = this.sessions.get(id);
    if (record === undefined) throw notFound(id);
    record.lastHeartbeat = this.options.clock.monotonic();
    record.lastHeartbeatWall = this.options.clock.now();
    return infoOf(record);
  }

  /** One heartbeat for many sessions (a client's batch); answers the ids it does not know. */
  heartbeatAll(ids: readonly string[]): string[] {
    const now = this.options.clock.monotonic();
    const wall = this.options.clock.now();
    const unknown: string[] = [];
    for (const id of ids) {
      const record = this.sessions.get(id);
      if (record === undefined) {
        unknown.push(id);
      } else {
        record.lastHeartbeat = now;
        record.lastHeartbeatWall = wall;
      }
    }
    return unknown;
  }

  end(id: string, reason: EndReason): boolean {
    const record = this.sessions.get(id);
    if (record === undefined) return false;
    this.sessions.delete(id);
    for (const lease of record.leases) lease.release();
    this.log(id).info({ reason }, 'session ended');
    const removal = this.options.onEnd?.(infoOf(record), reason);
    if (removal !== undefined) {
      // A session is never shown ended while its container may still run.
      this.ending.set(id, record);
      const gone = (): void => {
        if (this.ending.get(id) === record) this.ending.delete(id);
      };
      // Its failure is the caller's to report; listed or not, the session has ended.
      void removal.then(gone, gone);
    }
    return true;
  }

  has(id: string): boolean {
    return this.sessions.has(id);
  }

  /** Open sessions, and ended ones whose container is still being removed. */
  list(): SessionInfo[] {
    return [...this.sessions.values(), ...this.ending.values()].map(infoOf);
  }

  /** Each session's own sockets, as a next daemon should serve them again (those its bridges can keep). */
  keptSessions(): KeptSession[] {
    return [...this.sessions.values()].flatMap((record) => {
      const endpoints = record.leases.flatMap((lease) => (lease.kept === undefined ? [] : [lease.kept()]));
      return endpoints.length === 0 ? [] : [{ sessionId: record.info.id, clientPid: record.info.clientPid, clientStartTime: record.clientStartTime, endpoints }];
    });
  }

  /**
   * Called on a timer; a dead client is noticed within one sweep interval. Heartbeats that could
   * not arrive because the daemon itself was stalled (SIGSTOP, a laptop asleep) do not count
   * against a live client: after a stall its lease runs one more TTL from the resume. Every age
   * here is monotonic (clock.ts): a sleep either ages nothing (the clock stopped) or shows as a
   * late sweep; a wall clock set either way changes nothing.
   */
  async sweep(): Promise<void> {
    const { clock, leaseTtlMs, sweepIntervalMs, probe } = this.options;
    const now = clock.monotonic();
    if (now - this.lastSweepAt > STALL_FACTOR * sweepIntervalMs) {
      this.graceUntil = now + leaseTtlMs;
      this.options.logger.warn({ module: 'session', stalledMs: now - this.lastSweepAt }, 'the daemon was stalled; leases of live clients get one more TTL');
    }
    this.lastSweepAt = now;
    const records = [...this.sessions];
    if (records.length === 0) return;
    const alive = await probe.startTimes([...new Set(records.map(([, record]) => record.info.clientPid))]);
    for (const [id, record] of records) {
      if (this.sessions.get(id) !== record) continue;
      if (!sameProcess(alive, record.info.clientPid, record.clientStartTime)) {
        this.end(id, 'client-exited');
        continue;
      }
      // Acquired without it (macOS: this sweep's one `ps` reads every client's): from here on a
      // reused pid is told apart. One reused before now keeps the session only until its lease runs out.
      const learned = record.clientStartTime === null ? (alive.get(record.info.clientPid) ?? null) : null;
      if (learned !== null) {
        record.clientStartTime = learned;
        this.options.onStartTime?.(record.info, learned);
      }
      // A stopped client (Ctrl-Z) is the user's, not a dead one: its lease runs from the last sweep
      // that saw it stopped, so after SIGCONT it has a whole TTL to send its next heartbeat.
      const stopped = alive.stopped?.has(record.info.clientPid) === true;
      if (stopped) {
        record.lastHeartbeat = now;
        if (!record.clientStopped) this.log(id).info({ clientPid: record.info.clientPid }, 'client stopped; lease kept');
      }
      record.clientStopped = stopped;
      if (now - record.lastHeartbeat > leaseTtlMs && now >= this.graceUntil) this.end(id, 'lease-expired');
    }
  }

  endAll(reason: EndReason): void {
    for (const id of [...this.sessions.keys()]) this.end(id, reason);
  }

  private log(sessionId: string): Logger {
    return this.options.logger.child({ module: 'session', sessionId });
  }
}

/** `lastHeartbeatAt` and the refusals on the session's sockets are read when asked, not kept up to date. */
function infoOf(record: SessionRecord): SessionInfo {
  let refused = 0;
  for (const lease of record.leases) refused += lease.refused?.() ?? 0;
  return { ...record.info, lastHeartbeatAt: new Date(record.lastHeartbeatWall).toISOString(), refused };
}

function notFound(id: string): SandboxdError {
  return new SandboxdError('SESSION_NOT_FOUND', `no session ${id}`);
}
