import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { inspectAgentSocket, reachablePath } from '../../daemon/plan/agent-socket.js';

/** A user name long enough that the agents' sockets below exceed macOS's 103 bytes. */
const HOME = '/Users/firstname.middlename.lastname.junior';
/** 1Password's agent (developer.1password.com/docs/ssh/agent/compatibility: `IdentityAgent`). */
const ONEPASSWORD = `${HOME}/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock`;
/** Secretive's agent (maxgoedjen/secretive, APP_CONFIG.md: `IdentityAgent`). */
const SECRETIVE = `${HOME}/Library/Containers/com.maxgoedjen.Secretive.SecretAgent/Data/socket.ssh`;

describe('the path an agent is reached by', () => {
  it('is the real path when it fits, else the link the user gave, else none', () => {
    expect(Buffer.byteLength(ONEPASSWORD)).toBeGreaterThan(103);
    expect(Buffer.byteLength(SECRETIVE)).toBeGreaterThan(103);
    const link = `${HOME}/.ssh/agent.sock`;
    expect(reachablePath(link, ONEPASSWORD, 'darwin')).toBe(link);
    expect(reachablePath(link, SECRETIVE, 'darwin')).toBe(link);
    // Linux allows 107: a real path that fits there is preferred (the bridges key by it).
    expect(reachablePath(link, ONEPASSWORD, 'linux')).toBe(ONEPASSWORD);
    // A long path through a linked directory whose real path is short: the real path.
    expect(reachablePath(`${HOME}/${'x'.repeat(100)}/agent.sock`, '/tmp/a.sock', 'darwin')).toBe('/tmp/a.sock');
    expect(reachablePath(ONEPASSWORD, ONEPASSWORD, 'darwin')).toBeNull();
    // Bytes, not characters: a name in UTF-8 can be under the limit in characters and over it in bytes.
    const wide = `/Users/${'é'.repeat(50)}/a.sock`;
    expect(wide.length).toBeLessThanOrEqual(103);
    expect(reachablePath(wide, wide, 'darwin')).toBeNull();
  });
});

describe('inspectAgentSocket with a real socket behind a long path', () => {
  const dirs: string[] = [];
  const servers: net.Server[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  /** A listener moved into a directory that makes its path `length` bytes (it keeps serving there). */
  async function deepSocket(length: number): Promise<{ dir: string; real: string }> {
    const dir = mkdtempSync('/tmp/sbx-as-');
    dirs.push(dir);
    const server = net.createServer((client) => client.end());
    servers.push(server);
    const short = path.join(dir, 's.sock');
    await new Promise<void>((resolve) => server.listen(short, resolve));
    const deep = path.join(dir, 'd'.repeat(length - Buffer.byteLength(path.join(dir, 'x', 'agent.sock')) + 1));
    mkdirSync(deep);
    const real = path.join(deep, 'agent.sock');
    renameSync(short, real);
    expect(Buffer.byteLength(real)).toBe(length);
    return { dir, real };
  }

  it('connects through the short link, never the real path it cannot address', async () => {
    const { dir, real } = await deepSocket(137);
    const link = path.join(dir, 'l');
    symlinkSync(real, link);
    expect(await inspectAgentSocket(link, 'proxy', 'linux')).toEqual({ usable: true, path: link, keys: null });
  });

  it('says the paths are too long, naming both, when the link is long too', async () => {
    const { dir, real } = await deepSocket(137);
    const link = path.join(dir, 'l'.repeat(110 - Buffer.byteLength(dir) - 1));
    symlinkSync(real, link);
    expect(await inspectAgentSocket(link, 'SSH_AUTH_SOCK', 'linux')).toEqual({
      usable: false,
      reason: `SSH_AUTH_SOCK ${link} is 110 bytes, and its real path ${real} is 137: a socket address on linux holds at most 107`,
      tooLong: { remedy: `Link the socket from a shorter path and point SSH_AUTH_SOCK at the link: \`ln -s '${real}' ~/.ssh/agent.sock && export SSH_AUTH_SOCK=~/.ssh/agent.sock\`.` },
    });
    expect(await inspectAgentSocket(real, 'socket proxy', 'linux')).toEqual({
      usable: false,
      reason: `socket proxy ${real} is 137 bytes: a socket address on linux holds at most 107`,
      tooLong: { remedy: `Link the socket from a shorter path (\`ln -s '${real}' ~/.ssh/proxy.sock\`) and ask for the link instead.` },
    });
  });
});
