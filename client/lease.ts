import type { AcquireResponse, HostSocketStatus, SessionGit, SessionInfo } from '../shared/contracts/sessions.js';
import { sessionRoute } from '../shared/contracts/session-routes.js';
import type { Plan } from '../shared/contracts/plan.js';
import { SandboxdError } from '../shared/errors.js';
import { startHeartbeats } from './heartbeats.js';
import { request } from './transport.js';
import { ReleaseResponseShape } from '../shared/contracts/answer-shapes.js';

export interface Session {
  /** The current lease: a lease the daemon lost is renewed under a new id (same request, same bridges). */
  readonly id: string;
  readonly info: SessionInfo;
  readonly plan: Plan;
  /** One status per requested socket: forwarded, or skipped with the reason. */
  readonly sockets: HostSocketStatus[];
  /**
   * Idempotent; resolves once the daemon has dropped the lease (or is gone) and brought the
   * sandbox's git work home, with what it could not apply (null outside a repository, or when no
   * daemon answered).
   */
  release(): Promise<SessionGit | null>;
  /** release(), for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface LeaseOptions {
  socketPath: string;
  /** Sends the session's acquire again, renewing lease `renews`. */
  renew(renews: string): Promise<AcquireResponse>;
  /** Keep the lease alive with heartbeats (else it lives until released or its client exits). */
  heartbeat: boolean;
}

/** The daemon answers a release once the session's last git sync is done, or after 30 s without it. */
const RELEASE_TIMEOUT_MS = 40_000;

/**
 * Holds an acquired session's lease: heartbeats on the process's shared timer, a renewal when the
 * daemon lost it, and one release however often it is asked for.
 */
export function holdLease(acquired: AcquireResponse, options: LeaseOptions): Session {
  const { socketPath } = options;
  let current = acquired.session;
  let stopHeartbeats: (() => void) | null = null;
  let renewing: Promise<void> | null = null;
  // The daemon lost the lease (it was restarted, or reaped it while stalled) although this process
  // still holds the container: take a new lease for the same request, so its bridges stay held and
  // the container stays tied to a lease (a restarted daemon hands it over to the new one).
  const renew = (): Promise<void> => {
    renewing ??= options
      .renew(current.id)
      .then((again) => {
        current = again.session;
      })
      .catch(() => undefined)
      .finally(() => {
        renewing = null;
      });
    return renewing;
  };
  if (options.heartbeat) {
    // One timer and one request per interval for all of this process's sessions (client/heartbeats.ts).
    stopHeartbeats = startHeartbeats(socketPath, acquired.heartbeatIntervalMs, {
      id: () => (renewing === null ? current.id : null),
      lost: (id) => {
        if (id === current.id) void renew();
      },
    });
  }

  let released: Promise<SessionGit | null> | null = null;
  const release = (): Promise<SessionGit | null> => {
    released ??= (async () => {
      stopHeartbeats?.();
      // A renewal under way ends with the lease this release must drop.
      await renewing;
      try {
        const answer = await request({ socketPath, method: 'DELETE', route: sessionRoute(current.id), timeoutMs: RELEASE_TIMEOUT_MS }, ReleaseResponseShape);
        return answer.git;
      } catch (error) {
        // A daemon that is gone has already dropped the lease.
        if (!(error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING')) throw error;
        return null;
      }
    })();
    return released;
  };
  return {
    get id() {
      return current.id;
    },
    get info() {
      return current;
    },
    plan: acquired.plan,
    sockets: acquired.sockets,
    release,
    [Symbol.asyncDispose]: async () => {
      await release();
    },
  };
}
