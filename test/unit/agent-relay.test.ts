import { existsSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRelay } from '../../daemon/bridges/agent-relay.js';
import { SESSION_MAX_OPEN, SESSION_RATE_PER_SECOND, UPSTREAM_MAX_OPEN, UpstreamGate } from '../../daemon/bridges/bounds.js';
import { createLogger } from '../../daemon/os/logger.js';
import { Cleanup, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

async function listen(socket: string, onClient: (client: net.Socket) => void): Promise<net.Server> {
  const server = net.createServer(onClient);
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  cleanup.add(() => new Promise((resolve) => server.close(resolve)));
  return server;
}

/**
 * One connection through `socket`: "served" once the far end answered a ping (the connection is
 * then kept open until the test ends), "refused" when it was closed without an answer.
 */
function connect(socket: string): Promise<{ outcome: 'served' | 'refused'; client: net.Socket; answer: string }> {
  return new Promise((resolve) => {
    const client = net.connect(socket, () => {
      client.write('ping');
    });
    cleanup.add(() => client.destroy());
    client.once('data', (chunk: Buffer) => {
      resolve({ outcome: 'served', client, answer: chunk.toString() });
    });
    client.on('close', () => {
      resolve({ outcome: 'refused', client, answer: '' });
    });
    client.on('error', () => undefined);
  });
}

/** A started relay in a temp dir, in front of an upstream standing in for the agent: it answers "agent" and keeps each connection. */
async function relay() {
  const dir = mkdtempSync('/tmp/sbx-relay-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const upstream = path.join(dir, 'upstream.sock');
  const held: net.Socket[] = [];
  await listen(upstream, (client) => {
    held.push(client);
    client.on('data', () => client.write('agent'));
    client.on('error', () => undefined);
  });
  cleanup.add(() => {
    for (const client of held) client.destroy();
  });
  let now = 0;
  const bridge = new AgentRelay({ id: 'relay_t', agentSocket: upstream, agentsDir: path.join(dir, 'agents'), gate: new UpstreamGate(), monotonic: () => now, logger: createLogger({ kind: 'silent' }) });
  cleanup.add(() => bridge.halt());
  bridge.start();
  await bridge.whenReady();
  return { bridge, held, advance: (ms: number) => (now += ms) };
}

describe('AgentRelay: each session has its own socket, bounded, closed when the session ends (real Unix sockets)', () => {
  it('gives each session its own 0666 socket in its own 0711 directory, both piped to the agent', async () => {
    const { bridge } = await relay();
    const one = await bridge.open();
    const two = await bridge.open();
    expect(one.dir).not.toBe(two.dir);
    expect(path.dirname(one.dir)).toBe(path.dirname(two.dir));
    expect(statSync(one.dir).mode & 0o777).toBe(0o711);
    expect(statSync(one.endpoint.socketPath).mode & 0o777).toBe(0o666);
    expect((await connect(one.endpoint.socketPath)).answer).toBe('agent');
    expect((await connect(two.endpoint.socketPath)).answer).toBe('agent');
    expect(bridge.describe(2)).toMatchObject({ endpoints: 2, open: 2, refused: 0 });
  });

  it(`a session holding ${String(SESSION_MAX_OPEN)} connections is refused more at once on its own socket only, and counted`, async () => {
    const { bridge } = await relay();
    const greedy = await bridge.open();
    const other = await bridge.open();
    const outcomes = [];
    for (let i = 0; i < SESSION_MAX_OPEN + 5; i += 1) outcomes.push((await connect(greedy.endpoint.socketPath)).outcome);
    expect(outcomes.filter((outcome) => outcome === 'served')).toHaveLength(SESSION_MAX_OPEN);
    expect(outcomes.slice(SESSION_MAX_OPEN)).toEqual(Array(5).fill('refused'));
    expect(greedy.endpoint.refused).toBe(5);
    expect((await connect(other.endpoint.socketPath)).outcome).toBe('served');
    expect(other.endpoint.refused).toBe(0);
    expect(bridge.describe(2)).toMatchObject({ open: SESSION_MAX_OPEN + 1, refused: 5 });
  });

  it(`accepts ${String(SESSION_RATE_PER_SECOND)} new connections a second per session, then refuses until time passes`, async () => {
    const { bridge, advance } = await relay();
    const session = await bridge.open();
    for (let i = 0; i < SESSION_RATE_PER_SECOND; i += 1) {
      const { outcome, client } = await connect(session.endpoint.socketPath);
      expect(outcome).toBe('served');
      client.destroy();
      // The served count drops once the relay sees the close.
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect((await connect(session.endpoint.socketPath)).outcome).toBe('refused');
    advance(1000 / SESSION_RATE_PER_SECOND);
    expect((await connect(session.endpoint.socketPath)).outcome).toBe('served');
  });

  it(`holds at most ${String(UPSTREAM_MAX_OPEN)} connections to the agent across every session`, async () => {
    const { bridge, held } = await relay();
    const sessions = await Promise.all(Array.from({ length: Math.ceil(UPSTREAM_MAX_OPEN / SESSION_MAX_OPEN) + 1 }, () => bridge.open()));
    const outcomes = [];
    for (const session of sessions) for (let i = 0; i < SESSION_MAX_OPEN; i += 1) outcomes.push((await connect(session.endpoint.socketPath)).outcome);
    expect(outcomes.filter((outcome) => outcome === 'served')).toHaveLength(UPSTREAM_MAX_OPEN);
    expect(held).toHaveLength(UPSTREAM_MAX_OPEN);
    expect(sessions.at(-1)?.endpoint.refused).toBe(SESSION_MAX_OPEN);
  });

  it('makes the next session socket ahead when asked, never on an acquire\'s path: an acquire takes it, and a halt removes the one nobody took', async () => {
    const { bridge } = await relay();
    const first = await bridge.open();
    const agents = path.dirname(first.dir);
    const socketName = path.basename(first.endpoint.socketPath);
    // The acquire made its own socket and nothing else.
    expect(readdirSync(agents)).toEqual([path.basename(first.dir)]);
    bridge.makeSpare();
    const ahead = await waitFor(() => readdirSync(agents).find((name) => name !== path.basename(first.dir) && existsSync(path.join(agents, name, socketName))), 'the socket made ahead');
    // Made ahead, it is no session's: not among the relay's sockets.
    expect(bridge.describe(1)).toMatchObject({ endpoints: 1 });
    const second = await bridge.open();
    expect(path.basename(second.dir)).toBe(ahead);
    expect((await connect(second.endpoint.socketPath)).answer).toBe('agent');
    expect(bridge.describe(2)).toMatchObject({ endpoints: 2 });
    expect(readdirSync(agents)).toHaveLength(2);
    bridge.makeSpare();
    bridge.makeSpare();
    await waitFor(() => readdirSync(agents).length === 3, 'the next socket made ahead');
    await bridge.halt();
    expect(readdirSync(agents).sort()).toEqual([path.basename(first.dir), path.basename(second.dir)].sort());
  });

  it('closing a session\'s socket ends its connections and removes its directory; kept, the directory stays for the next daemon', async () => {
    const { bridge } = await relay();
    const ended = await bridge.open();
    const kept = await bridge.open();
    const open = await connect(ended.endpoint.socketPath);
    const closed = new Promise((resolve) => open.client.once('close', resolve));
    await bridge.close(ended, false);
    await closed;
    expect(existsSync(ended.dir)).toBe(false);
    await bridge.close(kept, true);
    expect(existsSync(kept.dir)).toBe(true);
    expect(existsSync(kept.endpoint.socketPath)).toBe(false);
    // The next daemon binds the same path in the same directory: a container's mount names its inode.
    const inode = statSync(kept.dir).ino;
    const again = await bridge.open(path.basename(kept.dir));
    expect(statSync(again.dir).ino).toBe(inode);
    expect((await connect(again.endpoint.socketPath)).answer).toBe('agent');
  });

  it('finds a session socket that is not the one it bound, re-creates it and keeps what it found as lastError', async () => {
    const { bridge } = await relay();
    const session = await bridge.open();
    const socket = session.endpoint.socketPath;
    renameSync(socket, `${socket}.moved`);
    await listen(socket, (client) => client.once('data', () => client.end('impostor')));
    expect((await connect(socket)).answer).toBe('impostor');

    await Promise.all([bridge.check(), bridge.check()]);
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1, lastError: expect.stringMatching(/agent\.sock is not the socket it bound; re-created it$/) as string });
    expect((await connect(socket)).answer).toBe('agent');
    await bridge.check();
    expect(bridge.describe(1).restarts).toBe(1);
  });

  it('a restart binds every session socket again at the same path', async () => {
    const { bridge } = await relay();
    const session = await bridge.open();
    await bridge.restart();
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1 });
    expect((await connect(session.endpoint.socketPath)).answer).toBe('agent');
  });
});
