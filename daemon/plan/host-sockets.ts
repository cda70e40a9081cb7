import path from 'node:path';
import type { Mount } from '../../shared/contracts/plan.js';
import type { AcquireInput, HostSocketRequest, HostSocketStatus, SshBridgeSetting } from '../../shared/contracts/sessions.js';
import { RELAY_SOCKET_NAME } from '../bridges/agent-relay.js';
import type { Lease, ServedAgent, ServeRole, Unavailable } from '../bridges/bridge.js';
import type { AgentSocketCheck } from './agent-socket.js';

/** How the plan reaches the host's sockets and the bridges that carry them into a container. */
export interface SshDeps {
  /** `label` names the socket in a reason (default: SSH_AUTH_SOCK). */
  inspect(socket: string | undefined, label?: string): Promise<AgentSocketCheck>;
  /**
   * Serves a host socket through the bridge the session needs, or says why none can be used;
   * `name` is the socket's in the session (null: the agent).
   */
  serve(hostSocket: string, input: AcquireInput, role: ServeRole, name: string | null): Promise<ServedAgent | Unavailable>;
}

/** Each extra socket's directory in every container is `<this>/<name>/`. */
export const CONTAINER_SOCKETS_DIR = '/run/sandboxd/sockets';

export interface SocketsSection {
  statuses: HostSocketStatus[];
  mounts: Mount[];
  env: Record<string, string>;
  /** One run-flag group per bridge that asked for one (e.g. `--security-opt label=disable`). */
  flagGroups: string[][];
  warnings: string[];
  leases: Lease[];
}

interface Planned {
  status: HostSocketStatus;
  mount: Mount | null;
  lease: Lease | null;
  flags: string[];
  warnings: string[];
}

/** Both bridges serve the socket under the relay's name inside the mounted directory. */
export function containerSocketPath(name: string): string {
  return path.posix.join(CONTAINER_SOCKETS_DIR, name, RELAY_SOCKET_NAME);
}

/**
 * `none` and `desktop` describe the agent only (Docker Desktop's bridge serves its own agent, not
 * any host socket): extra sockets then take the bridge `auto` would.
 */
function socketBridge(setting: SshBridgeSetting): SshBridgeSetting {
  return setting === 'none' || setting === 'desktop' ? 'auto' : setting;
}

function skipped(name: string, reason: string): Planned {
  return { status: { name, status: 'skipped', reason }, mount: null, lease: null, flags: [], warnings: [`socket ${name} is not forwarded: ${reason}`] };
}

async function planOne(request: HostSocketRequest, input: AcquireInput, deps: SshDeps): Promise<Planned> {
  const { name } = request;
  try {
    const check = await deps.inspect(request.hostPath, `socket ${name}`);
    if (!check.usable) return skipped(name, check.reason);
    const served = await deps.serve(check.realpath, { ...input, sshBridge: socketBridge(input.sshBridge) }, 'socket', name);
    if ('unavailable' in served) return skipped(name, served.unavailable);
    if (served.kind === 'desktop' || served.mountSource === null) return skipped(name, 'its bridge serves only the ssh agent');
    const dir = path.posix.join(CONTAINER_SOCKETS_DIR, name);
    return {
      status: {
        name,
        status: 'forwarded',
        bridge: served.kind,
        socket: containerSocketPath(name),
        hostSocket: check.realpath,
        bridgeId: served.lease.bridgeId,
        env: request.env ?? null,
      },
      // Read-only, as the agent's directory (plan/ssh.ts): the bridge is shared with other sessions.
      mount: { source: served.mountSource, target: dir, readOnly: true, purpose: `socket ${name}`, relabel: served.relabel },
      lease: served.lease,
      flags: served.flags,
      warnings: served.warnings,
    };
  } catch (error) {
    // An extra socket is never worth failing the launch: a bridge that cannot be had is a warning.
    return skipped(name, error instanceof Error ? error.message : String(error));
  }
}

/**
 * DESIGN §8 "Extra sockets": each requested host socket is carried by the agent's machinery (the
 * relay on Linux, a tunnel into a Podman machine, keyed by the socket's realpath, so it is just
 * another lease) and mounted at `/run/sandboxd/sockets/<name>/`. One that is missing, does not
 * answer or cannot be bridged is skipped with a warning.
 */
export async function planHostSockets(input: AcquireInput, deps: SshDeps): Promise<SocketsSection> {
  const planned = await Promise.all(input.sockets.map((request) => planOne(request, input, deps)));
  const env: Record<string, string> = {};
  for (const { status } of planned) if (status.status === 'forwarded' && status.env !== null) env[status.env] = status.socket;
  return {
    statuses: planned.map((entry) => entry.status),
    mounts: planned.flatMap((entry) => (entry.mount === null ? [] : [entry.mount])),
    env,
    flagGroups: planned.map((entry) => entry.flags).filter((flags) => flags.length > 0),
    warnings: planned.flatMap((entry) => entry.warnings),
    leases: planned.flatMap((entry) => (entry.lease === null ? [] : [entry.lease])),
  };
}

/** Appends each flag group not already present (every tunnel into one VM asks for the same). */
export function mergeFlagGroups(flags: readonly string[], groups: readonly (readonly string[])[]): string[] {
  const merged = [...flags];
  const seen = new Set([flags.join('\0')]);
  for (const group of groups) {
    const key = group.join('\0');
    if (seen.has(key)) continue;
    seen.add(key);
    merged.push(...group);
  }
  return merged;
}
