/*
 * The bounds on a session's sockets (DESIGN §9: each session's agent is its own). A container can
 * open connections to its socket as fast and as many as it likes; each one the daemon serves costs
 * a connection to the user's agent, whose file descriptors are few (ssh-agent stops accepting at
 * its soft limit less ten, 1,024 by default: past it every other session's `ssh-add` and the
 * user's own wait). So one session gets a few at once and a steady rate, and every session
 * together gets a share of the agent well under its limit; a connection past a bound is closed at
 * once on that session's socket, never queued.
 */

/**
 * Connections one session's socket serves at once: an ssh or git command holds one or two, and a
 * parallel submodule fetch a handful.
 */
export const SESSION_MAX_OPEN = 8;
/** New connections per second one session's socket accepts (a token bucket, as many in a burst). */
export const SESSION_RATE_PER_SECOND = 20;
/**
 * Connections open at once toward one host socket (the user's agent) across all sessions: well
 * under an agent's usual fd limit, so the user's own ssh and ssh-add always find room.
 */
export const UPSTREAM_MAX_OPEN = 64;

/** `rate` tokens a second, at most `burst` kept; `now` is monotonic ms. */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    private readonly rate: number,
    private readonly burst: number,
    private readonly now: () => number,
  ) {
    this.tokens = burst;
    this.at = now();
  }

  take(): boolean {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.rate) / 1000);
    this.at = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** How many connections to one upstream are open, across every session's socket. */
export class UpstreamGate {
  private held = 0;
  /** Connections some session's socket refused because this gate was full. */
  refusedHere = 0;

  constructor(readonly max: number = UPSTREAM_MAX_OPEN) {}

  get open(): number {
    return this.held;
  }

  take(): boolean {
    if (this.held >= this.max) {
      this.refusedHere += 1;
      return false;
    }
    this.held += 1;
    return true;
  }

  give(): void {
    this.held = Math.max(0, this.held - 1);
  }
}

/** One gate per host socket, whichever bridge serves it: the bound holds across relays and tunnels. */
export class UpstreamGates {
  private readonly gates = new Map<string, UpstreamGate>();

  for(upstream: string): UpstreamGate {
    let gate = this.gates.get(upstream);
    if (gate === undefined) {
      gate = new UpstreamGate();
      this.gates.set(upstream, gate);
    }
    return gate;
  }
}
