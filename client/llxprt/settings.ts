import path from 'node:path';
import type { ContainerUser, HostSocketRequest, SshAgentSetting } from '../../shared/contracts/sessions.js';

/** llxprt's node user in its sandbox image. */
export const LLXPRT_NODE_USER: ContainerUser = { uid: 1000, gid: 1000, home: '/home/node' };
export const CREDENTIAL_SOCKET_NAME = 'credential-proxy';
export const CREDENTIAL_SOCKET_ENV = 'LLXPRT_CREDENTIAL_SOCKET';

/** What llxprt's own settings ask of a sandboxd session (../shared/llxprt.md). */
export interface LlxprtSettings {
  optedOut: boolean;
  sshAgent: SshAgentSetting;
  /** llxprt's `on` only warns when no agent is forwarded; the adapter says so too. */
  warnIfAgentSkipped: boolean;
  containerUser: ContainerUser;
  mounts: string[];
  sockets: HostSocketRequest[];
  warnings: string[];
}

export interface HostFacts {
  uid: number;
  gid: number;
  home: string;
  /** Whether a path exists on the host (custom mount sources must). */
  exists(file: string): boolean;
}

function firstSet(env: NodeJS.ProcessEnv, ...names: string[]): string | undefined {
  for (const name of names) {
    const value = env[name];
    if (value !== undefined && value !== '') return value;
  }
  return undefined;
}

const FALSE = new Set(['0', 'false', 'off', 'no']);
const TRUE = new Set(['1', 'true', 'on', 'yes']);

/**
 * llxprt's custom mounts: comma-separated `from[:to][:ro|rw]`, read-only by default, absolute
 * existing sources. An entry llxprt would not mount is left out with a warning rather than failing
 * the session; the rest become sandboxd mount specs (the same `src:dst:mode` shape).
 */
export function parseLlxprtMounts(value: string | undefined, host: Pick<HostFacts, 'exists'>): { mounts: string[]; warnings: string[] } {
  const mounts: string[] = [];
  const warnings: string[] = [];
  for (const entry of (value ?? '').split(',').map((part) => part.trim()).filter((part) => part !== '')) {
    const parts = entry.split(':');
    const mode = parts.at(-1) === 'ro' || parts.at(-1) === 'rw' ? parts.pop() : 'ro';
    const [from = '', to = from, ...extra] = parts;
    if (extra.length > 0 || !path.isAbsolute(from) || !path.isAbsolute(to)) {
      warnings.push(`sandbox mount "${entry}" is not from[:to][:ro|rw] with absolute paths; it is left out`);
    } else if (!host.exists(from)) {
      warnings.push(`sandbox mount "${entry}" names ${from}, which does not exist; it is left out`);
    } else mounts.push(`${from}:${to}:${mode ?? 'ro'}`);
  }
  return { mounts, warnings };
}

/** Reads llxprt's environment the way llxprt does, and says what the session should ask for. */
export function llxprtSettings(env: NodeJS.ProcessEnv, host: HostFacts, setUidGid?: boolean): LlxprtSettings {
  const optedOut = FALSE.has((env.LLXPRT_SANDBOXD ?? '').toLowerCase());
  const agent = (firstSet(env, 'LLXPRT_SANDBOX_SSH_AGENT', 'SANDBOX_SSH_AGENT') ?? 'auto').toLowerCase();
  const uidGid = setUidGid ?? TRUE.has((env.SANDBOX_SET_UID_GID ?? '').toLowerCase());
  const { mounts, warnings } = parseLlxprtMounts(firstSet(env, 'LLXPRT_SANDBOX_MOUNTS', 'SANDBOX_MOUNTS'), host);
  const credentialSocket = firstSet(env, CREDENTIAL_SOCKET_ENV);
  const sockets: HostSocketRequest[] = [];
  if (credentialSocket !== undefined && path.isAbsolute(credentialSocket)) {
    sockets.push({ name: CREDENTIAL_SOCKET_NAME, hostPath: credentialSocket, env: CREDENTIAL_SOCKET_ENV });
  } else if (credentialSocket !== undefined) {
    warnings.push(`${CREDENTIAL_SOCKET_ENV} is ${credentialSocket}, not an absolute path; the credential proxy is not forwarded`);
  }
  return {
    optedOut,
    // `on` never aborts llxprt's launch: it is an attempt that warns when it does not forward.
    sshAgent: agent === 'off' ? 'off' : 'auto',
    warnIfAgentSkipped: agent === 'on',
    containerUser: uidGid ? { uid: host.uid, gid: host.gid, home: host.home } : LLXPRT_NODE_USER,
    mounts,
    sockets,
    warnings,
  };
}
