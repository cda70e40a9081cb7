import { HEARTBEATS_ROUTE, MAX_HEARTBEAT_BATCH, heartbeatRoute } from '../shared/contracts/session-routes.js';
import { HeartbeatBatchResponseShape, HeartbeatResponseShape } from '../shared/contracts/answer-shapes.js';
import { SandboxdError } from '../shared/errors.js';
import { request } from './transport.js';

/** A held session as the heartbeat timer sees it. */
export interface HeartbeatSubject {
  /** The current lease; null while it is being renewed (nothing to send for it then). */
  id(): string | null;
  /** The daemon no longer knows lease `id`: take a new one (unless that lease was already replaced). */
  lost(id: string): void;
}

interface Pulse {
  socketPath: string;
  intervalMs: number;
  timer: NodeJS.Timeout | null;
  subjects: Set<HeartbeatSubject>;
  /** A round still under way (a slow daemon) makes the next tick a no-op. */
  beating: boolean;
}

/** One timer per daemon socket for the whole process, however many sessions it holds. */
const pulses = new Map<string, Pulse>();

function codeOf(error: unknown): string | null {
  return error instanceof SandboxdError ? error.code : null;
}

/** A daemon from before the batch route: one request per session, as it expects. */
async function oneByOne(socketPath: string, ids: readonly string[]): Promise<string[]> {
  const unknown: string[] = [];
  await Promise.all(
    ids.map((id) =>
      request({ socketPath, method: 'POST', route: heartbeatRoute(id), idempotent: true }, HeartbeatResponseShape).catch((error: unknown) => {
        if (codeOf(error) === 'SESSION_NOT_FOUND') unknown.push(id);
      }),
    ),
  );
  return unknown;
}

/**
 * One heartbeat round: every held lease in one `POST /v1/heartbeats` (a request per
 * MAX_HEARTBEAT_BATCH ids); each lease the daemon no longer knows is handed back to its session.
 * A daemon that cannot be reached is tried again on the next round, as a single heartbeat was.
 */
export async function heartbeatOnce(socketPath: string, subjects: Iterable<HeartbeatSubject>): Promise<void> {
  const held = new Map<string, HeartbeatSubject>();
  for (const subject of subjects) {
    const id = subject.id();
    if (id !== null) held.set(id, subject);
  }
  const ids = [...held.keys()];
  for (let start = 0; start < ids.length; start += MAX_HEARTBEAT_BATCH) {
    const batch = ids.slice(start, start + MAX_HEARTBEAT_BATCH);
    let unknown: string[];
    try {
      unknown = (await request({ socketPath, method: 'POST', route: HEARTBEATS_ROUTE, body: { sessions: batch }, idempotent: true }, HeartbeatBatchResponseShape)).unknown;
    } catch (error) {
      if (codeOf(error) !== 'NOT_FOUND') return;
      unknown = await oneByOne(socketPath, batch);
    }
    for (const id of unknown) held.get(id)?.lost(id);
  }
}

function tick(pulse: Pulse): void {
  if (pulse.beating) return;
  pulse.beating = true;
  void heartbeatOnce(pulse.socketPath, pulse.subjects).finally(() => {
    pulse.beating = false;
  });
}

/**
 * Keeps `subject`'s lease alive on the process's shared, unref'd timer for `socketPath` (it runs at
 * the shortest interval any of its sessions was given); the returned function stops it.
 */
export function startHeartbeats(socketPath: string, intervalMs: number, subject: HeartbeatSubject): () => void {
  let pulse = pulses.get(socketPath);
  if (pulse === undefined) {
    pulse = { socketPath, intervalMs, timer: null, subjects: new Set(), beating: false };
    pulses.set(socketPath, pulse);
  }
  pulse.subjects.add(subject);
  if (pulse.timer === null || intervalMs < pulse.intervalMs) {
    if (pulse.timer !== null) clearInterval(pulse.timer);
    const target = pulse;
    target.intervalMs = intervalMs;
    target.timer = setInterval(() => {
      tick(target);
    }, intervalMs);
    target.timer.unref();
  }
  const own = pulse;
  return () => {
    own.subjects.delete(subject);
    if (own.subjects.size > 0) return;
    if (own.timer !== null) clearInterval(own.timer);
    own.timer = null;
    if (pulses.get(socketPath) === own) pulses.delete(socketPath);
  };
}
