import type { AcquireInput } from '../../shared/contracts/sessions.js';
import type { Clock } from '../os/clock.js';
import type { EngineStatus } from '../../shared/contracts/status.js';
import type { Platform } from '../../shared/paths.js';
import type { FingerprintCache } from '../cache/fingerprint-cache.js';
import type { Defer } from '../cache/quiet-time.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { probeBuiltinSocket, type ProbeImage } from './builtin-probe.js';
import { createEngineIdentifier, type IdentifiedEngine, type IdentifyRequest } from './engine-identifier.js';
import type { EngineBridge } from './profile.js';
import { ProbeCache, type ProbeRecord } from './probe-cache.js';

/** Engines shown by `sandboxd status`: the most recent instances, older ones forgotten. */
const MAX_REMEMBERED = 16;
/** What every probe runs (the cache keeps an answer that could not tell per image). */
const SANDBOXD_IMAGE = 'sandboxd-relay';

export interface DockerEnginesDeps {
  run: RunSubprocess;
  platform: Platform;
  /** The daemon user's home, where docker finds `~/.docker`. */
  home: string;
  /** Wall time is shown (`identifiedAt`, a probe's time); ages run on the monotonic clock. */
  clock: Clock;
  probeTimeoutMs?: number;
  /** When refreshes of old answers start (the daemon's quiet time). */
  defer?: Defer;
}

interface Seen {
  engine: IdentifiedEngine;
  at: number;
}

function describeBridge(bridge: EngineBridge): string {
  return bridge.kind === 'skip' ? `skip: ${bridge.reason}` : bridge.kind;
}

/** Identification and built-in socket probes of every Docker engine the sessions use (DESIGN §7). */
export class DockerEngines {
  private readonly identifier: FingerprintCache<IdentifyRequest, IdentifiedEngine>;
  private readonly probes: ProbeCache;
  private readonly seen = new Map<string, Seen>();

  constructor(private readonly deps: DockerEnginesDeps) {
    this.identifier = createEngineIdentifier({ run: deps.run, platform: deps.platform, now: () => deps.clock.monotonic(), defer: deps.defer });
    this.probes = new ProbeCache({ now: () => deps.clock.monotonic(), wall: () => deps.clock.now(), defer: deps.defer });
  }

  async identify(input: AcquireInput): Promise<IdentifiedEngine> {
    const env = input.client.env ?? {};
    const engine = await this.identifier.get({
      path: input.client.path ?? '',
      dockerHost: env.DOCKER_HOST,
      dockerContext: env.DOCKER_CONTEXT,
      dockerConfig: env.DOCKER_CONFIG,
      home: this.deps.home,
      sshAuthSock: input.client.sshAuthSock,
    });
    this.remember(engine);
    return engine;
  }

  /**
   * The probe of the engine's built-in socket, run with sandboxd's own image whatever image the
   * session runs: its answer is kept for every session of the engine instance.
   */
  probe(engine: IdentifiedEngine, socket: string, image: ProbeImage): Promise<ProbeRecord> {
    return this.probes.get(engine.identity.instance, SANDBOXD_IMAGE, () =>
      probeBuiltinSocket(socket, { run: this.deps.run, docker: engine.docker, env: engine.env, image, timeoutMs: this.deps.probeTimeoutMs }),
    );
  }

  list(): EngineStatus[] {
    return [...this.seen.values()].map(({ engine, at }) => {
      const { identity } = engine;
      const probe = this.probes.latest(identity.instance);
      return {
        instance: identity.instance,
        kind: identity.kind,
        name: identity.label,
        endpoint: identity.endpoint,
        bridge: describeBridge(identity.bridge),
        identifiedAt: new Date(at).toISOString(),
        probe: probe === null ? null : { state: probe.state, detail: probe.detail, keys: probe.keys.length, at: new Date(probe.checkedAt).toISOString() },
      };
    });
  }

  private remember(engine: IdentifiedEngine): void {
    const { instance } = engine.identity;
    const at = this.seen.get(instance)?.at ?? this.deps.clock.now();
    this.seen.delete(instance);
    this.seen.set(instance, { engine, at });
    for (const old of [...this.seen.keys()].slice(0, Math.max(0, this.seen.size - MAX_REMEMBERED))) {
      this.seen.delete(old);
      this.probes.forget(old);
    }
  }
}
