import { mkdtempSync, renameSync, rmSync, unlinkSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AgentRelay } from '../../daemon/bridges/agent-relay.js';
import { createLogger } from '../../daemon/os/logger.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(async () => {
  vi.restoreAllMocks();
  await cleanup.run();
});

async function listen(socket: string, onClient: (client: net.Socket) => void): Promise<net.Server> {
  const server = net.createServer(onClient);
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  cleanup.add(() => new Promise((resolve) => server.close(resolve)));
  return server;
}

/** One round trip through `socket`: what the far end answered to "ping". */
function ask(socket: string): Promise<string> {
  return new Promise((resolve) => {
    const client = net.connect(socket, () => {
      client.write('ping');
    });
    let answer = '';
    client.on('data', (chunk: Buffer) => {
      answer += chunk.toString();
      client.end();
    });
    client.on('close', () => {
      resolve(answer);
    });
    client.on('error', () => {
      resolve('refused');
    });
  });
}

/** A relay in a temp dir, not started, in front of an upstream that stands in for the agent (it answers "agent"). */
async function unstarted() {
  const dir = mkdtempSync('/tmp/sbx-relay-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const upstream = path.join(dir, 'upstream.sock');
  await listen(upstream, (client) => client.once('data', () => client.end('agent')));
  const bridge = new AgentRelay({ id: 'relay_t', agentSocket: upstream, dir: path.join(dir, 'served'), logger: createLogger({ kind: 'silent' }) });
  cleanup.add(() => bridge.halt());
  return bridge;
}

/** A real relay, started and ready. */
async function relay() {
  const bridge = await unstarted();
  bridge.start();
  await bridge.whenReady();
  return { bridge, socket: bridge.socketPath };
}

describe('AgentRelay: a socket that is not the one it bound is noticed and re-created (real Unix sockets)', () => {
  it('finds an impostor at agent.sock, re-creates the relay and keeps what it found as lastError', async () => {
    const { bridge, socket } = await relay();
    expect(await ask(socket)).toBe('agent');
    renameSync(socket, `${socket}.moved`);
    await listen(socket, (client) => client.once('data', () => client.end('impostor')));
    expect(await ask(socket)).toBe('impostor');

    await Promise.all([bridge.check(), bridge.check()]);
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1, lastError: expect.stringMatching(/agent\.sock is not the socket it bound \(inode \d+ is there, not \d+\); re-created it$/) as string });
    expect(await ask(socket)).toBe('agent');
    // Nothing changed since: the next look costs an lstat and restarts nothing.
    await bridge.check();
    expect(bridge.describe(1).restarts).toBe(1);
  });

  it('a removed socket is re-created at the next acquire (whenReady)', async () => {
    const { bridge, socket } = await relay();
    unlinkSync(socket);
    expect(await ask(socket)).toBe('refused');
    await bridge.whenReady();
    expect(bridge.describe(1)).toMatchObject({ restarts: 1, lastError: expect.stringContaining('(nothing is there)') as string });
    expect(await ask(socket)).toBe('agent');
  });
});

describe('AgentRelay: a listen that a restart or halt overtook closes the server it made (real Unix sockets)', () => {
  /** Every server the relay creates; `during` runs as the first is created, before it listens. */
  function servers(during: () => Promise<void>): { made: net.Server[]; overtaking: () => Promise<void> } {
    const create = net.createServer.bind(net);
    const made: net.Server[] = [];
    let overtaking: Promise<void> = Promise.resolve();
    vi.spyOn(net, 'createServer').mockImplementation(((listener?: (socket: net.Socket) => void) => {
      const server = create(listener);
      made.push(server);
      if (made.length === 1) overtaking = during();
      return server;
    }) as typeof net.createServer);
    return { made, overtaking: () => overtaking };
  }

  it('a restart: only the newer server listens, at agent.sock', async () => {
    const bridge = await unstarted();
    const { made, overtaking } = servers(() => bridge.restart());
    bridge.start();
    await bridge.whenReady().catch(() => undefined);
    await overtaking();
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1 });
    expect(made.map((server) => server.listening)).toEqual([false, true]);
    expect(await ask(bridge.socketPath)).toBe('agent');
  });

  it('a halt: no server listens once the halt is done', async () => {
    const bridge = await unstarted();
    const { made, overtaking } = servers(() => bridge.halt());
    bridge.start();
    await bridge.whenReady().catch(() => undefined);
    await overtaking();
    expect(bridge.describe(0).state).toBe('stopped');
    expect(made.map((server) => server.listening)).toEqual([false]);
  });
});
