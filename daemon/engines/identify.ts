import { stableHash } from '../os/text.js';
import { colima } from './colima.js';
import type { DockerInfo } from './docker-info.js';
import { dockerDesktop } from './docker-desktop.js';
import { dockerEngine } from './docker-engine.js';
import { orbstack } from './orbstack.js';
import { podman } from './podman.js';
import type { EngineBridge, EngineKind, EngineProfile, HostFacts } from './profile.js';
import { rancherDesktop } from './rancher-desktop.js';

/** Most specific first: products that name themselves, then Podman, then a local plain engine. */
export const PROFILES: readonly EngineProfile[] = [dockerDesktop, orbstack, rancherDesktop, colima, podman, dockerEngine];

const ANY_ENGINE_REMEDY = 'Use Docker Desktop, OrbStack, `colima start --ssh-agent`, a Podman machine or an ssh:// DOCKER_HOST, or pass --ssh-agent off.';

export interface EngineIdentity {
  kind: EngineKind;
  /** `Docker Desktop`, or for an unknown engine its own name and OS. */
  label: string;
  endpoint: string;
  /** Changes when the engine restarts: the key of everything cached per engine. */
  instance: string;
  architecture: string;
  /** The engine runs without root: its container root is the user, other uids are sub-uids. */
  rootless: boolean;
  bridge: EngineBridge;
}

export interface IdentifyInput {
  info: DockerInfo;
  /** null when the session's docker context names no endpoint sandboxd can read. */
  endpoint: string | null;
  host: HostFacts;
  /** Identity of the local engine socket (inode, mtime): a restarted engine makes a new one. */
  socketStamp: string | null;
}

function describeUnknown(info: DockerInfo): string {
  return `${info.Name || 'an unnamed engine'} (${info.OperatingSystem || 'unknown OS'}, server ${info.ServerVersion})`;
}

/** ssh:// and tcp:// say where the engine is whatever it is, unless its VM has its own socket. */
function bridgeFor(profile: EngineProfile | undefined, input: IdentifyInput, endpoint: string): EngineBridge {
  const own = profile?.bridge(input.info, input.host);
  if (own?.kind === 'builtin') return own;
  if (endpoint.startsWith('ssh://')) return { kind: 'ssh-tunnel', uri: endpoint };
  if (!endpoint.startsWith('unix://')) {
    return {
      kind: 'skip',
      reason: `the Docker engine is reached at ${endpoint}, another machine sandboxd has no way into`,
      remedy: 'Reach it over ssh (`DOCKER_HOST=ssh://user@host`, or a docker context with an ssh:// host) so sandboxd can tunnel the agent, or pass --ssh-agent off.',
    };
  }
  if (own !== undefined) return own;
  return {
    kind: 'skip',
    reason: `the Docker engine at ${endpoint} is ${describeUnknown(input.info)}: it does not share this host's kernel and offers no agent socket sandboxd knows`,
    remedy: ANY_ENGINE_REMEDY,
  };
}

/** DESIGN §7: what engine `docker info` describes and which bridge its containers get. */
export function identifyEngine(input: IdentifyInput): EngineIdentity {
  const { info, host } = input;
  const profile = PROFILES.find((candidate) => candidate.matches(info, host));
  const endpoint = input.endpoint ?? 'unknown';
  const kind = profile?.kind ?? 'unknown';
  const id = profile?.stableId === true ? info.ID : '';
  return {
    kind,
    label: profile?.label ?? describeUnknown(info),
    endpoint,
    instance: `eng_${stableHash([kind, id, endpoint, input.socketStamp ?? ''].join('\n'), 16)}`,
    architecture: info.Architecture,
    rootless: (info.SecurityOptions ?? []).some((option) => option.split(',').includes('name=rootless')),
    bridge: bridgeFor(profile, input, endpoint),
  };
}
