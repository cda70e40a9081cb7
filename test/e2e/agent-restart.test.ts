import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { listSessions, listTunnels } from '../../dist/client/index.js';
import { Cleanup, cli, cliEnv, makeSandbox, startAgent, waitFor, type Sandbox } from '../helpers.js';
import { startPodmanMachine } from '../lab/podman-machine.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** Asks the agent every 0.2 s, numbering each answer: `ok <n>` or `lost <n>`; ends after two minutes. */
const LOOP = 'i=0; while [ $i -lt 600 ]; do i=$((i+1)); if ssh-add -l >/dev/null 2>&1; then echo "ok $i"; else echo "lost $i"; fi; sleep 0.2; done';

/** What the daemons of a sandbox logged, every rotation included. */
function logOf(sandbox: Sandbox): string {
  const dir = sandbox.env.SANDBOXD_LOG_DIR;
  return readdirSync(dir).map((name) => readFileSync(path.join(dir, name), 'utf8')).join('\n');
}

/** What a newer client sends an older daemon (protocol policy, step 4): make way once the last session ends. */
function drain(socketPath: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request({ socketPath, path: '/v1/drain', method: 'POST', headers: { connection: 'close' } }, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => {
        resolve({ status: response.statusCode ?? 0, body });
      });
    });
    request.on('error', reject);
    request.end();
  });
}

/**
 * A container started by `sandboxd run` (its client holds the session and heartbeats) that asks
 * the agent in a loop; `next(what)` waits for an answer after the ones seen so far.
 */
function loopingContainer(env: NodeJS.ProcessEnv, image: string, bridge: string[]) {
  const child = cli(['run', '--quiet', '--engine', 'podman', ...bridge, '--', '--rm', '--network', 'none', '--user', '1000:1000', image, 'sh', '-c', LOOP], env, 240_000);
  cleanup.add(() => {
    child.kill('SIGTERM');
    return child.catch(() => undefined);
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const answers = (): string[] => out.split('\n').filter((line) => /^(ok|lost) \d+$/.test(line));
  let seen = 0;
  return {
    child,
    /** The next answer that is `what`, after every answer seen before; bounded. */
    async next(what: 'ok' | 'lost', timeoutMs = 30_000): Promise<string> {
      const from = seen;
      const found = await waitFor(() => answers().slice(from).find((line) => line.startsWith(`${what} `)), `the container to answer ${what}`, timeoutMs, 100);
      seen = answers().indexOf(found) + 1;
      return found;
    },
  };
}

/** The two bridges served by the daemon itself: the local relay, and a Podman machine's tunnel (the lab's sshd as the VM). */
type Shape = 'Linux relay' | 'Podman machine tunnel';
const SHAPES: Shape[] = ['Linux relay', 'Podman machine tunnel'];

describe.skipIf(labMissing)('a running container keeps its agent across a graceful restart, stop and start, and a drain (real podman, ssh-agent, sshd)', () => {
  async function setup(shape: Shape) {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const machine: Record<string, string> = shape === 'Linux relay' ? {} : { CONTAINERS_CONF: await startPodmanMachine(sandbox, podmanEnv, cleanup) };
    const env = cliEnv(sandbox, { ...podmanEnv, ...machine, SSH_AUTH_SOCK: agent.socket });
    expect((await cli(['start'], env)).exitCode).toBe(0);
    const container = loopingContainer(env, image, ['--ssh-bridge', shape === 'Linux relay' ? 'mount' : 'tunnel']);
    await container.next('ok', 60_000);
    const [before] = await listSessions(env);
    expect(before).toBeDefined();
    return { sandbox, env, container, before: before?.id ?? '' };
  }

  /** The client renewed its lease with the new daemon and took over the socket its container mounts. */
  async function adopted(sandbox: Sandbox, env: NodeJS.ProcessEnv, before: string): Promise<void> {
    await waitFor(async () => (await listSessions(env)).some((session) => session.id !== before), 'the client to renew its lease', 30_000, 200);
    await waitFor(() => logOf(sandbox).includes('a renewed session took its socket over'), 'the renewal to take the socket over', 10_000, 100);
    // Taken over, not made anew: the bridge serves one session socket, the one the container mounts.
    expect((await listTunnels(env)).map((bridge) => bridge.endpoints)).toEqual([1]);
  }

  it.each(SHAPES)('%s: `sandboxd restart`', async (shape) => {
    const { sandbox, env, container, before } = await setup(shape);
    expect((await cli(['restart'], env)).exitCode).toBe(0);
    await container.next('ok');
    await adopted(sandbox, env, before);
    await container.next('ok');
  });

  it.each(SHAPES)('%s: `sandboxd stop`, then `sandboxd start`', async (shape) => {
    const { sandbox, env, container, before } = await setup(shape);
    const stopped = await cli(['stop'], env);
    expect(stopped.stderr).toContain('stop answering until a daemon runs again, which serves the same sockets');
    await container.next('lost');
    expect((await cli(['start'], env)).exitCode).toBe(0);
    await container.next('ok');
    await adopted(sandbox, env, before);
    await container.next('ok');
  });

  it.each(SHAPES)('%s: a drain (a newer client asked the daemon to make way), then the restart that ends it', async (shape) => {
    const { sandbox, env, container, before } = await setup(shape);
    const asked = await drain(path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock'));
    expect(asked).toEqual({ status: 202, body: JSON.stringify({ sessions: 1 }) });
    await container.next('ok');
    expect((await cli(['restart'], env)).exitCode).toBe(0);
    await container.next('ok');
    await adopted(sandbox, env, before);
    await container.next('ok');
  });
});
