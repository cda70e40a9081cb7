import { promises as fs } from 'node:fs';
import net from 'node:net';

const AGENT_CONNECT_TIMEOUT_MS = 1000;

export type AgentSocketCheck = { usable: true; realpath: string } | { usable: false; reason: string };

/**
 * Reads, never writes: the path came from the client and is only stat-ed and connected to.
 * `label` names the socket in reasons: the agent's variable, or an extra socket's name.
 */
export async function inspectAgentSocket(sshAuthSock: string | undefined, label = 'SSH_AUTH_SOCK'): Promise<AgentSocketCheck> {
  if (sshAuthSock === undefined || sshAuthSock === '') {
    return { usable: false, reason: `${label} is not set in the client environment` };
  }
  if (!sshAuthSock.startsWith('/')) {
    return { usable: false, reason: `${label} ${sshAuthSock} is not an absolute path` };
  }
  let realpath: string;
  let isSocket: boolean;
  try {
    realpath = await fs.realpath(sshAuthSock);
    isSocket = (await fs.stat(realpath)).isSocket();
  } catch {
    return { usable: false, reason: `${label} ${sshAuthSock} does not exist` };
  }
  if (!isSocket) return { usable: false, reason: `${label} ${sshAuthSock} is not a socket` };
  const answers = await new Promise<boolean>((resolve) => {
    const socket = net.connect(realpath);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(false);
    }, AGENT_CONNECT_TIMEOUT_MS);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
  return answers ? { usable: true, realpath } : { usable: false, reason: `nothing answers on ${label} ${sshAuthSock}` };
}
