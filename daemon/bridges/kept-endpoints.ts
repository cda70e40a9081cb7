import type { Timers } from '../os/clock.js';
import type { Logger } from '../os/logger.js';
import { sameProcess, type ProcessProbe } from '../os/process-identity.js';
import type { ServedAgent } from './bridge.js';
import type { EndpointRecords, KeptCredentials, KeptEndpoint, KeptSession } from './endpoint-records.js';

/** A change is written this long after it (the last of a burst): a thousand acquires cost one write. */
const WRITE_DELAY_MS = 1_000;

export interface KeptEndpointsDeps {
  records: EndpointRecords;
  probe: ProcessProbe;
  /** Serves a recorded socket again at the path it had (the same directory, the same VM path). */
  reopen(endpoint: KeptEndpoint): Promise<ServedAgent>;
  /** The live sessions' sockets now, as the next daemon should find them. */
  live(): KeptSession[];
  /**
   * A git credential socket served again answers its session's recorded hosts from now on, as
   * that session; the returned function ends that. Without it such a socket answers nothing.
   */
  answer?(endpointPath: string, sessionId: string, credentials: KeptCredentials): () => void;
  /** How long a socket served again waits for its client's renewal: one lease. */
  ttlMs: number;
  timers: Timers;
  logger: Logger;
}

/** A socket served again for a session of the previous daemon, until its client renews or the wait ends. */
interface Held {
  session: Omit<KeptSession, 'endpoints'>;
  endpoint: KeptEndpoint;
  served: ServedAgent;
  /** Stops a credential socket's answers (none for other sockets). */
  silence: () => void;
}

/**
 * Keeps running containers' sockets across a daemon's graceful restart, stop and start, and
 * upgrade drain (DESIGN §5, §9): the sessions' sockets are recorded in the state dir; the next
 * daemon serves the recorded ones whose client still runs (pid and start time) at the same paths
 * for one lease, and the client's renewal (`renews`) takes them over, so its container, whose
 * mount names those paths, keeps its agent. A session's git credential socket answers the hosts
 * its record names meanwhile, as that session (DESIGN §8), and stops the moment the renewal takes
 * it (the renewed session answers from then on) or the socket closes. Those not taken over within
 * the lease are closed, as a session that ended.
 */
export class KeptEndpoints {
  private readonly held = new Map<string, Held[]>();
  private loaded: Promise<void> = Promise.resolve();
  private live: Promise<KeptSession[]> = Promise.resolve([]);
  private cancelExpiry: (() => void) | null = null;
  private cancelWrite: (() => void) | null = null;
  /** The daemon stops: the record written last stands, whatever ends after it. */
  private frozen = false;
  private readonly logger: Logger;

  constructor(private readonly deps: KeptEndpointsDeps) {
    this.logger = deps.logger.child({ module: 'kept-endpoints' });
  }

  /**
   * At start-up: what the previous daemon recorded, served again; answers the recorded sessions
   * whose client still runs once their sockets are served (for the helpers' sweep). found()
   * answers them before that.
   */
  start(): Promise<KeptSession[]> {
    this.live = this.deps.records.load().then((loaded) => this.liveOf(loaded));
    const sessions = this.live.then((live) => this.reopenLive(live));
    this.loaded = sessions.then(
      () => undefined,
      (error: unknown) => {
        this.logger.error({ err: error }, 'cannot serve the recorded sessions\' sockets again');
      },
    );
    return sessions.catch(() => []);
  }

  /**
   * The recorded sessions whose client still runs, known before their sockets are served again
   * (a tunnel's is a login to its VM): what must not be removed as left over.
   */
  found(): Promise<KeptSession[]> {
    return this.live.catch(() => []);
  }

  private async liveOf(sessions: readonly KeptSession[]): Promise<KeptSession[]> {
    if (sessions.length === 0) return [];
    const alive = await this.deps.probe.startTimes([...new Set(sessions.map((session) => session.clientPid))]);
    return sessions.filter((session) => sameProcess(alive, session.clientPid, session.clientStartTime));
  }

  private async reopenLive(live: readonly KeptSession[]): Promise<KeptSession[]> {
    if (live.length === 0) return [];
    await Promise.all(
      live.flatMap(({ endpoints, ...session }) =>
        endpoints.map(async (endpoint) => {
          try {
            const served = await this.deps.reopen(endpoint);
            const silence = this.answer(session.sessionId, endpoint, served);
            this.held.set(session.sessionId, [...(this.held.get(session.sessionId) ?? []), { session, endpoint, served, silence }]);
          } catch (error) {
            this.logger.warn({ err: error, sessionId: session.sessionId, kind: endpoint.kind }, 'cannot serve a recorded socket again');
          }
        }),
      ),
    );
    if (this.held.size > 0) {
      this.logger.info({ sessions: this.held.size, ttlMs: this.deps.ttlMs }, 'serving the sockets of the previous daemon\'s live sessions until their clients renew');
      this.cancelExpiry = this.deps.timers.after(this.deps.ttlMs, () => {
        this.expire();
      });
    }
    return [...live];
  }

  /**
   * A credential socket served again answers its recorded hosts; any other socket, or one whose
   * record names none (an earlier release's), answers nothing.
   */
  private answer(sessionId: string, endpoint: KeptEndpoint, served: ServedAgent): () => void {
    if (endpoint.kind === 'docker' || endpoint.credentials === undefined || served.endpointPath === undefined || this.deps.answer === undefined) return () => undefined;
    this.logger.info({ sessionId, hosts: endpoint.credentials.hosts }, 'a recorded git credential socket answers its session\'s hosts until its client renews');
    return this.deps.answer(served.endpointPath, sessionId, endpoint.credentials);
  }

  /**
   * A renewal of `renews` by its own client takes over the socket it had for `name` (null: the
   * agent), when it still serves the same host socket; null otherwise.
   */
  async take(renews: string, clientPid: number, name: string | null, upstream: string): Promise<ServedAgent | null> {
    await this.loaded;
    const held = this.held.get(renews);
    const found = held?.find((entry) => entry.endpoint.name === name && entry.endpoint.upstream === upstream);
    if (held === undefined || found === undefined || found.session.clientPid !== clientPid) return null;
    const rest = held.filter((entry) => entry !== found);
    if (rest.length === 0) this.held.delete(renews);
    else this.held.set(renews, rest);
    found.silence();
    this.logger.info({ sessionId: renews, name }, 'a renewed session took its socket over');
    return found.served;
  }

  /**
   * The sweep: a socket whose client ended before renewing is closed at once, as its session would
   * have been (no renewal can come, and its container must not keep the agent for the rest of the lease).
   */
  async sweep(): Promise<void> {
    if (this.held.size === 0) return;
    const entries = [...this.held.entries()];
    const alive = await this.deps.probe.startTimes([...new Set(entries.map(([, held]) => held[0]?.session.clientPid ?? 0))]);
    // A renewal may have taken some over while the probe ran: only what is still held goes.
    const gone = entries.filter(([id, held]) => {
      const client = held[0]?.session;
      return this.held.get(id) === held && (client === undefined || !sameProcess(alive, client.clientPid, client.clientStartTime));
    });
    if (gone.length === 0) return;
    for (const [id] of gone) this.held.delete(id);
    this.logger.info({ sessions: gone.map(([id]) => id) }, 'their clients ended before renewing; closing their sockets');
    for (const [, held] of gone) for (const entry of held) close(entry);
    if (this.held.size === 0) {
      this.cancelExpiry?.();
      this.cancelExpiry = null;
    }
    this.changed();
  }

  /** What is still waiting for a renewal, as the next daemon should find it. */
  private waiting(): KeptSession[] {
    return [...this.held.values()].map((entries) => ({ ...(entries[0]?.session as Held['session']), endpoints: entries.map((entry) => entry.endpoint) }));
  }

  /** Something changed: written a moment later, once for a burst. */
  changed(): void {
    if (this.cancelWrite !== null || this.frozen) return;
    this.cancelWrite = this.deps.timers.after(WRITE_DELAY_MS, () => {
      this.cancelWrite = null;
      void this.write();
    });
  }

  /**
   * The daemon stops gracefully: every live session's sockets and those still waiting are written
   * now, and nothing after (the sessions end as it stops; their sockets stay for the next daemon).
   */
  async freeze(): Promise<void> {
    this.frozen = true;
    this.cancelWrite?.();
    this.cancelWrite = null;
    await this.write();
  }

  private write(): Promise<void> {
    return this.deps.records.save([...this.deps.live(), ...this.waiting()]);
  }

  /** The wait is over: sockets no renewal took are closed, as a session that ended. */
  private expire(): void {
    this.cancelExpiry = null;
    const left = [...this.held.keys()];
    if (left.length === 0) return;
    this.logger.info({ sessions: left }, 'no renewal took these sockets over within a lease; closing them');
    this.release();
    this.changed();
  }

  /** Gives every held socket back (at expiry, or as the daemon stops: then the bridges keep them). */
  release(): void {
    const entries = [...this.held.values()].flat();
    this.held.clear();
    this.cancelExpiry?.();
    this.cancelExpiry = null;
    for (const entry of entries) close(entry);
  }
}

/** A held socket no renewal took: its answers stop before it closes. */
function close(entry: Held): void {
  entry.silence();
  entry.served.lease.release();
}
