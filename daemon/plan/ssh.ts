import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { AcquireInput, HostSocketStatus } from '../../shared/contracts/sessions.js';
import { AGENT_REMEDY, agentNotForwarded, type Mount, type SshStatus } from '../../shared/contracts/plan.js';
import { CONTAINER_AGENT_DIR, type Lease } from '../bridges/bridge.js';
import type { GitCredentialsStatus } from '../../shared/contracts/sessions.js';
import { planGitCredentials, type CredentialDeps } from './git-credentials.js';
import { mergeFlagGroups, planHostSockets, type SshDeps } from './host-sockets.js';
import type { AgentSocketCheck } from './agent-socket.js';

/** The agent's socket in every container, inside the bridge's agent directory. */
export const CONTAINER_AGENT_SOCKET = path.posix.join(CONTAINER_AGENT_DIR, 'agent.sock');

export interface SshSection {
  ssh: SshStatus;
  /** The session's extra host sockets, carried by the same bridges as the agent. */
  sockets: HostSocketStatus[];
  /** The session's git credential socket, carried by the same bridges (null: none asked for). */
  gitCredentials: GitCredentialsStatus;
  /** What was set that needs no action (which hosts' credentials are served). */
  notices: string[];
  mounts: Mount[];
  env: Record<string, string>;
  flags: string[];
  warnings: string[];
  leases: Lease[];
}

type AgentSection = Omit<SshSection, 'sockets' | 'gitCredentials' | 'notices'>;

/** What the session's own sockets need beyond the bridges: its id and the daemon's credential server. */
export interface SessionSockets {
  sessionId: string;
  credentials?: CredentialDeps;
  /** The agent's socket, already being looked at (`deps.inspect` of the client's SSH_AUTH_SOCK). */
  agentCheck?: Promise<AgentSocketCheck>;
}

function skipped(reason: string): AgentSection {
  return { ssh: { status: 'skipped', reason }, mounts: [], env: {}, flags: [], warnings: [], leases: [] };
}

/**
 * The agent and the session's extra host sockets, bridged together. When the agent fails the
 * session (`on` without one), the sockets' leases are given back before the error goes on.
 */
export async function planSsh(input: AcquireInput, deps: SshDeps, session: SessionSockets = { sessionId: '' }): Promise<SshSection> {
  const socketsPending = planHostSockets(input, deps);
  const credentialsPending = planGitCredentials(input, session.sessionId, deps, session.credentials);
  const agent = await planAgent(input, deps, session.agentCheck).catch(async (error: unknown) => {
    const [sockets, credentials] = await Promise.all([socketsPending, credentialsPending]);
    for (const lease of [...sockets.leases, ...credentials.leases]) lease.release();
    throw error;
  });
  const [sockets, credentials] = await Promise.all([socketsPending, credentialsPending]);
  return {
    ssh: agent.ssh,
    sockets: sockets.statuses,
    gitCredentials: credentials.status,
    mounts: [...agent.mounts, ...sockets.mounts, ...credentials.mounts],
    env: { ...sockets.env, ...credentials.env, ...agent.env },
    flags: mergeFlagGroups(agent.flags, [...sockets.flagGroups, credentials.flags].filter((flags) => flags.length > 0)),
    warnings: [...new Set([...agent.warnings, ...sockets.warnings, ...credentials.warnings])],
    notices: credentials.notices,
    leases: [...agent.leases, ...sockets.leases, ...credentials.leases],
  };
}

/**
 * An agent that answers with no keys forwards nothing useful: common on a Mac where 1Password or
 * Secretive is set up through `IdentityAgent` in ~/.ssh/config while SSH_AUTH_SOCK still names
 * launchd's empty agent.
 */
function noKeysWarning(socket: string): string {
  return `the ssh agent on SSH_AUTH_SOCK (${socket}) holds no keys, so the sandbox can authenticate with none: add one with \`ssh-add\`, or point SSH_AUTH_SOCK at the agent your ~/.ssh/config names in IdentityAgent (1Password, Secretive)`;
}

/** DESIGN §8, first bullet: `off` skips, `auto` skips with a reason, `on` without an agent fails. */
async function planAgent(input: AcquireInput, deps: SshDeps, agentCheck?: Promise<AgentSocketCheck>): Promise<AgentSection> {
  if (input.sshAgent === 'off') return skipped('ssh-agent is off for this session');
  const check = await (agentCheck ?? deps.inspect(input.client.sshAuthSock));
  if (!check.usable && check.tooLong !== undefined) {
    if (input.sshAgent === 'on') throw new SandboxdError('SOCKET_PATH_TOO_LONG', `ssh-agent is on but ${check.reason}`, { remedy: check.tooLong.remedy });
    return { ...skipped(check.reason), warnings: [agentNotForwarded(check.reason, `${check.tooLong.remedy} Or run without it: \`--ssh-agent off\`.`)] };
  }
  if (!check.usable) {
    if (input.sshAgent === 'on') throw new SandboxdError('SSH_AGENT_UNAVAILABLE', `ssh-agent is on but ${check.reason}`);
    return { ...skipped(check.reason), warnings: [agentNotForwarded(check.reason, `To forward one, ${AGENT_REMEDY}; or run without it: \`--ssh-agent off\`.`)] };
  }
  const served = await deps.serve(check.path, input, 'agent', null);
  if ('unavailable' in served) {
    if (input.sshAgent === 'on') throw new SandboxdError(served.code ?? 'SSH_BRIDGE_UNSUPPORTED', `ssh-agent is on but ${served.unavailable}`, served.remedy === undefined ? undefined : { remedy: served.remedy });
    // A reason with a remedy is news to the user (DESIGN §7: say so in the plan's warnings).
    return served.remedy === undefined ? skipped(served.unavailable) : { ...skipped(served.unavailable), warnings: [agentNotForwarded(served.unavailable, served.remedy)] };
  }
  return {
    ssh: {
      status: 'forwarded',
      bridge: served.kind,
      socket: CONTAINER_AGENT_SOCKET,
      hostAgentSocket: check.path,
      bridgeId: served.lease.bridgeId,
    },
    // Read-only: a container that could write its directory could put a listener of its own at
    // agent.sock, or fill it. connect() on a socket in a read-only mount still works (the read-only
    // check covers files, directories and links).
    mounts:
      served.mountSource === null
        ? []
        : [
            {
              source: served.mountSource,
              target: CONTAINER_AGENT_DIR,
              readOnly: true,
              purpose: 'ssh agent',
              relabel: served.relabel,
            },
          ],
    env: { SSH_AUTH_SOCK: CONTAINER_AGENT_SOCKET },
    flags: served.flags,
    warnings: [...(check.keys === 0 ? [noKeysWarning(check.path)] : []), ...served.warnings],
    leases: [served.lease],
  };
}
