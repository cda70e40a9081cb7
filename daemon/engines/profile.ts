import type { EngineStatus } from '../../shared/contracts/status.js';
import type { Platform } from '../../shared/paths.js';
import type { DockerInfo } from './docker-info.js';

export type EngineKind = EngineStatus['kind'];

/** Docker Desktop, OrbStack and Colima `--ssh-agent` serve the host's agent here, inside the VM. */
export const BUILTIN_AGENT_SOCKET = '/run/host-services/ssh-auth.sock';

/** How a session's agent reaches containers of this engine (DESIGN §7's table). */
export type EngineBridge =
  /** The VM's built-in socket, verified by a probe; `missingRemedy` when the probe finds none. */
  | { kind: 'builtin'; socket: string; missingRemedy: string }
  /** The docker CLI drives a Podman machine: the Podman tunnel of DESIGN §6. */
  | { kind: 'podman-tunnel' }
  /** DOCKER_HOST=ssh://…: an `ssh -R` tunnel into that host. */
  | { kind: 'ssh-tunnel'; uri: string }
  /** The engine shares this host's kernel and files: the local relay. */
  | { kind: 'relay' }
  | { kind: 'skip'; reason: string; remedy: string };

/** What sandboxd knows of the machine it runs on, to tell a local engine from one in a VM. */
export interface HostFacts {
  platform: Platform;
  /** `uname -r`: an engine reporting the same kernel runs on this host, not in a VM. */
  kernelRelease: string;
  /** Whether the engine's DockerRootDir exists on this host (its files are ours to see). */
  rootDirOnHost: boolean;
}

/**
 * One kind of engine behind the docker CLI: how `docker info` gives it away and how its agent
 * bridge is chosen. Each kind lives in its own file; `identify` asks them in order.
 */
export interface EngineProfile {
  readonly kind: EngineKind;
  readonly label: string;
  /** False where the engine makes up a new ID for every `docker info` (Podman's API does). */
  readonly stableId: boolean;
  matches(info: DockerInfo, host: HostFacts): boolean;
  /** The bridge over a local (unix://) endpoint; ssh:// and tcp:// are decided before, except for built-in sockets. */
  bridge(info: DockerInfo, host: HostFacts): EngineBridge;
}

/** Same kernel and the engine's files visible here: containers see this host's sockets. */
export function sharesHost(info: DockerInfo, host: HostFacts): boolean {
  return host.platform === 'linux' && info.KernelVersion !== '' && info.KernelVersion === host.kernelRelease && host.rootDirOnHost;
}
