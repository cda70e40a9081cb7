import { createHash } from 'node:crypto';
import net from 'node:net';

const SSH_AGENTC_REQUEST_IDENTITIES = 11;
const SSH_AGENT_IDENTITIES_ANSWER = 12;
const MAX_REPLY_BYTES = 256 * 1024;

/** `SHA256:…` as `ssh-add -l` prints it: unpadded base64 of the key blob's SHA-256. */
export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Parses an IDENTITIES_ANSWER body (after its length); null when it is not one. */
export function parseIdentities(body: Buffer): string[] | null {
  if (body.length < 5 || body[0] !== SSH_AGENT_IDENTITIES_ANSWER) return null;
  const count = body.readUInt32BE(1);
  const keys: string[] = [];
  let at = 5;
  for (let index = 0; index < count; index += 1) {
    if (at + 4 > body.length) return null;
    const blobLength = body.readUInt32BE(at);
    const blob = body.subarray(at + 4, at + 4 + blobLength);
    at += 4 + blobLength;
    if (at + 4 > body.length) return null;
    at += 4 + body.readUInt32BE(at);
    keys.push(fingerprintOf(blob));
  }
  return keys;
}

/**
 * The keys the session's own agent holds, asked the way `ssh-add -l` asks; null when the agent
 * does not answer in time (then nothing is compared and nothing is warned).
 */
export function listAgentKeys(socketPath: string, timeoutMs = 1_000): Promise<string[] | null> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    let reply = Buffer.alloc(0);
    const finish = (keys: string[] | null): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(keys);
    };
    const timer = setTimeout(() => {
      finish(null);
    }, timeoutMs);
    socket.once('connect', () => {
      socket.write(Buffer.from([0, 0, 0, 1, SSH_AGENTC_REQUEST_IDENTITIES]));
    });
    socket.on('data', (chunk: Buffer) => {
      reply = Buffer.concat([reply, chunk]);
      if (reply.length > MAX_REPLY_BYTES) {
        finish(null);
        return;
      }
      if (reply.length >= 4 && reply.length >= 4 + reply.readUInt32BE(0)) finish(parseIdentities(reply.subarray(4, 4 + reply.readUInt32BE(0))));
    });
    socket.once('error', () => {
      finish(null);
    });
    socket.once('close', () => {
      finish(null);
    });
  });
}
