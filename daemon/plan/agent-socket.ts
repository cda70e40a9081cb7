import { promises as fs } from 'node:fs';
import net from 'node:net';
import { currentPlatform, MAX_SOCKET_PATH_BYTES, type Platform } from '../../shared/paths.js';
import { shQuote } from '../os/text.js';

const AGENT_CONNECT_TIMEOUT_MS = 1000;

/**
 * `path`: where the bridges reach the socket, its real path, or the path the client gave when only
 * that fits the platform's socket limit; `keys`: how many identities the agent lists (null: not
 * asked, or no agent answer). An unusable socket whose every path is too long for a socket address
 * says so with `tooLong` (SOCKET_PATH_TOO_LONG), never as one where nothing answers.
 */
export type AgentSocketCheck =
  | { usable: true; path: string; keys: number | null }
  | { usable: false; reason: string; tooLong?: { remedy: string } };

/**
 * The path to connect to: the real path when it fits in a socket address, else the path the client
 * gave (a short link to, e.g., 1Password's socket under ~/Library/Group Containers), never one that
 * does not fit (Node would cut it short and could reach another socket). Null when neither fits.
 */
export function reachablePath(given: string, realpath: string, platform: Platform): string | null {
  const limit = MAX_SOCKET_PATH_BYTES[platform];
  if (Buffer.byteLength(realpath) <= limit) return realpath;
  if (Buffer.byteLength(given) <= limit) return given;
  return null;
}

function tooLong(label: string, given: string, realpath: string, platform: Platform): AgentSocketCheck {
  const limit = MAX_SOCKET_PATH_BYTES[platform];
  const lengths = given === realpath ? `${String(Buffer.byteLength(given))} bytes` : `${String(Buffer.byteLength(given))} bytes, and its real path ${realpath} is ${String(Buffer.byteLength(realpath))}`;
  return {
    usable: false,
    reason: `${label} ${given} is ${lengths}: a socket address on ${platform} holds at most ${String(limit)}`,
    tooLong: {
      remedy:
        label === 'SSH_AUTH_SOCK'
          ? `Link the socket from a shorter path and point SSH_AUTH_SOCK at the link: \`ln -s ${shQuote(realpath)} ~/.ssh/agent.sock && export SSH_AUTH_SOCK=~/.ssh/agent.sock\`.`
          : `Link the socket from a shorter path (\`ln -s ${shQuote(realpath)} ~/.ssh/${label.replace(/^socket /, '')}.sock\`) and ask for the link instead.`,
    },
  };
}

/** SSH2_AGENTC_REQUEST_IDENTITIES (11), framed: what `ssh-add -l` sends. */
const REQUEST_IDENTITIES = Buffer.from([0, 0, 0, 1, 11]);
const IDENTITIES_ANSWER = 12;

/** The key count from an SSH2_AGENT_IDENTITIES_ANSWER, once the frame header has arrived. */
function keyCount(reply: Buffer): number | null {
  if (reply.length < 9 || reply[4] !== IDENTITIES_ANSWER) return null;
  return reply.readUInt32BE(5);
}

/**
 * Reads, never writes: the path came from the client and is only stat-ed and connected to.
 * `label` names the socket in reasons: the agent's variable, or an extra socket's name.
 */
export async function inspectAgentSocket(sshAuthSock: string | undefined, label = 'SSH_AUTH_SOCK', platform: Platform = currentPlatform()): Promise<AgentSocketCheck> {
  if (sshAuthSock === undefined || sshAuthSock === '') {
    return { usable: false, reason: `${label} is not set in the client environment` };
  }
  if (!sshAuthSock.startsWith('/')) {
    return { usable: false, reason: `${label} ${sshAuthSock} is not an absolute path` };
  }
  let realpath: string;
  let isSocket: boolean;
  try {
    // Both at once, one thread-pool hop per acquire: a link swapped between them is no worse than
    // one swapped before the connect, which fails on anything but a listening socket.
    const [resolved, stat] = await Promise.all([fs.realpath(sshAuthSock), fs.stat(sshAuthSock)]);
    realpath = resolved;
    isSocket = stat.isSocket();
  } catch {
    return { usable: false, reason: `${label} ${sshAuthSock} does not exist` };
  }
  if (!isSocket) return { usable: false, reason: `${label} ${sshAuthSock} is not a socket` };
  const reachable = reachablePath(sshAuthSock, realpath, platform);
  if (reachable === null) return tooLong(label, sshAuthSock, realpath, platform);
  const answer = await new Promise<{ keys: number | null } | null>((resolve) => {
    const socket = net.connect(reachable);
    let reply = Buffer.alloc(0);
    let connected = false;
    const finish = (result: { keys: number | null } | null): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => {
      finish(connected ? { keys: null } : null);
    }, AGENT_CONNECT_TIMEOUT_MS);
    socket.once('connect', () => {
      connected = true;
      // Only an agent is asked for its keys; other sockets (a credential proxy) are only dialled.
      if (label === 'SSH_AUTH_SOCK') socket.write(REQUEST_IDENTITIES);
      else finish({ keys: null });
    });
    socket.on('data', (chunk: Buffer) => {
      reply = Buffer.concat([reply, chunk]);
      if (reply.length >= 9) finish({ keys: keyCount(reply) });
    });
    socket.once('error', () => {
      finish(connected ? { keys: null } : null);
    });
    socket.once('end', () => {
      finish(connected ? { keys: null } : null);
    });
  });
  return answer === null ? { usable: false, reason: `nothing answers on ${label} ${sshAuthSock}` } : { usable: true, path: reachable, keys: answer.keys };
}
