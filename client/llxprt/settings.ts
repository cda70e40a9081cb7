import type { ContainerUser, SshAgentSetting } from '../../shared/contracts/sessions.js';

/** llxprt's node user in its sandbox image. */
export const LLXPRT_NODE_USER: ContainerUser = { uid: 1000, gid: 1000, home: '/home/node' };

/** What llxprt's own settings ask of a sandboxd session (../shared/llxprt.md). */
export interface LlxprtSettings {
  optedOut: boolean;
  sshAgent: SshAgentSetting;
  containerUser: ContainerUser;
}

/** The host user llxprt runs as, who the container becomes under SANDBOX_SET_UID_GID. */
export interface HostUser {
  uid: number;
  gid: number;
  home: string;
}

const OPT_OUT = new Set(['0', 'false', 'off', 'no']);

/**
 * Reads llxprt's environment the way llxprt does, and says what the session should ask for.
 * `setUidGid` is llxprt's own decision (shouldUseCurrentUserInSandbox, true by default on
 * Debian and Ubuntu hosts); without it SANDBOX_SET_UID_GID is read as llxprt reads it.
 */
export function llxprtSettings(env: NodeJS.ProcessEnv, host: HostUser, setUidGid?: boolean): LlxprtSettings {
  // Exactly llxprt's reading (sandbox-ssh.ts): the first variable set wins, even when empty.
  const agent = env.LLXPRT_SANDBOX_SSH_AGENT ?? env.SANDBOX_SSH_AGENT;
  const uidGid = setUidGid ?? ['1', 'true'].includes(env.SANDBOX_SET_UID_GID?.toLowerCase().trim() ?? '');
  return {
    optedOut: OPT_OUT.has((env.LLXPRT_SANDBOXD ?? '').trim().toLowerCase()),
    // `on` is an attempt, never a condition: where sandboxd forwards nothing, llxprt's own step runs.
    sshAgent: agent === 'off' ? 'off' : 'auto',
    containerUser: uidGid ? { uid: host.uid, gid: host.gid, home: host.home } : LLXPRT_NODE_USER,
  };
}
