import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import type { Mount, SshStatus } from '../../shared/contracts/plan.js';
import type { Lease } from '../bridges/bridge.js';
import type { AgentSocketCheck } from './agent-socket.js';

/** Where the agent directory appears in every container; the socket inside it is `agent.sock`. */
export const CONTAINER_AGENT_DIR = '/run/sandboxd/ssh';
export const CONTAINER_AGENT_SOCKET = path.posix.join(CONTAINER_AGENT_DIR, 'agent.sock');

export interface SshSection {
  ssh: SshStatus;
  mounts: Mount[];
  env: Record<string, string>;
  flags: string[];
  warnings: string[];
  leases: Lease[];
}

/** A bridge that serves `agentSocket` from a directory the container can mount. */
export interface ServedAgent {
  lease: Lease;
  kind: 'mount' | 'tunnel';
  /** Host path (relay) or VM path (tunnel) of the directory to mount. */
  mountSource: string;
  relabel: Mount['relabel'];
  flags: string[];
  warnings: string[];
}

export interface SshDeps {
  inspect(sshAuthSock: string | undefined): Promise<AgentSocketCheck>;
  /** Serves the agent through the bridge the session needs, or says why none can be used. */
  serve(agentSocket: string, input: AcquireInput): Promise<ServedAgent | { unavailable: string }>;
}

function skipped(reason: string): SshSection {
  return { ssh: { status: 'skipped', reason }, mounts: [], env: {}, flags: [], warnings: [], leases: [] };
}

/** DESIGN §8, first bullet: `off` skips, `auto` skips with a reason, `on` without an agent fails. */
export async function planSsh(input: AcquireInput, deps: SshDeps): Promise<SshSection> {
  if (input.sshAgent === 'off') return skipped('ssh-agent is off for this session');
  const check = await deps.inspect(input.client.sshAuthSock);
  if (!check.usable) {
    if (input.sshAgent === 'on') throw new SandboxdError('SSH_AGENT_UNAVAILABLE', `ssh-agent is on but ${check.reason}`);
    return skipped(check.reason);
  }
  const served = await deps.serve(check.realpath, input);
  if ('unavailable' in served) {
    if (input.sshAgent === 'on') throw new SandboxdError('SSH_BRIDGE_UNSUPPORTED', `ssh-agent is on but ${served.unavailable}`);
    return skipped(served.unavailable);
  }
  return {
    ssh: {
      status: 'forwarded',
      bridge: served.kind,
      socket: CONTAINER_AGENT_SOCKET,
      hostAgentSocket: check.realpath,
      bridgeId: served.lease.bridgeId,
    },
    mounts: [
      {
        source: served.mountSource,
        target: CONTAINER_AGENT_DIR,
        readOnly: false,
        purpose: 'ssh agent',
        ...(served.relabel === undefined ? {} : { relabel: served.relabel }),
      },
    ],
    env: { SSH_AUTH_SOCK: CONTAINER_AGENT_SOCKET },
    flags: served.flags,
    warnings: served.warnings,
    leases: [served.lease],
  };
}
