import { mkdirSync, renameSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { CLI, Cleanup, cli, cliEnv, makeSandbox, startAgent, waitFor } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

describe.skipIf(labMissing)('sandboxd run with real podman containers (Linux direct mount)', () => {
  async function setup() {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const env = cliEnv(sandbox, { ...podmanEnv, SSH_AUTH_SOCK: agent.socket });
    return { env, image, agent, sandbox };
  }

  it.each([
    ['root', []],
    ['--user 1000', ['--user', '1000:1000']],
  ])('ssh-add -l lists the key inside the container as %s', async (_name, userArgs) => {
    const { env, image, agent } = await setup();
    const result = await cli(['run', '--quiet', '--engine', 'podman', '--', '--rm', '--network', 'none', ...userArgs, image, 'ssh-add', '-l'], env, 60_000);
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.stdout).toContain('sandboxd-test-agent');
    expect(result.exitCode).toBe(0);
  });

  /**
   * An agent whose real path exceeds Linux's 107-byte socket address, as 1Password's and Secretive's
   * under ~/Library/Group Containers do on a Mac with a long user name: the agent listens at a short
   * path and its socket is moved into a deep directory (a listening socket keeps serving under its
   * new name), then reached through a link of `linkLength` bytes. The kernel follows the link, so a
   * connect to the link reaches it; a connect to the real path cannot be written at all.
   */
  function deepAgent(dir: string, socket: string, linkLength: number): { real: string; link: string } {
    const deep = path.join(dir, 'deep', 'd'.repeat(137 - Buffer.byteLength(path.join(dir, 'deep', 'x', 'agent.sock')) + 1));
    mkdirSync(deep, { recursive: true });
    const real = path.join(deep, 'agent.sock');
    renameSync(socket, real);
    const link = linkLength === 0 ? path.join(dir, 'l') : path.join(dir, 'l'.repeat(linkLength - Buffer.byteLength(dir) - 1));
    symlinkSync(real, link);
    return { real, link };
  }

  it('an agent whose real path is too long for a socket address is reached through the short link the shell names', async () => {
    const { image, agent, sandbox } = await setup();
    const { real, link } = deepAgent(sandbox.dir, agent.socket, 0);
    expect(Buffer.byteLength(real)).toBe(137);
    const env = cliEnv(sandbox, { ...podmanLab().env, SSH_AUTH_SOCK: link });
    for (const userArgs of [[], ['--user', '1000:1000']]) {
      const result = await cli(['run', '--quiet', '--engine', 'podman', '--ssh-agent', 'on', '--', '--rm', '--network', 'none', ...userArgs, image, 'ssh-add', '-l'], env, 60_000);
      expect(result.stderr).toBe('');
      expect(result.stdout).toContain(agent.fingerprint);
      expect(result.exitCode).toBe(0);
    }
    const tunnels = JSON.parse((await cli(['tunnels', 'ls', '--json'], env)).stdout) as { hostAgentSocket: string }[];
    expect(tunnels.map((bridge) => bridge.hostAgentSocket)).toEqual([link]);
  });

  it('an agent whose link and real path are both too long is SOCKET_PATH_TOO_LONG naming both, never "nothing answers"', async () => {
    const { image, agent, sandbox } = await setup();
    const { real, link } = deepAgent(sandbox.dir, agent.socket, 120);
    const env = cliEnv(sandbox, { ...podmanLab().env, SSH_AUTH_SOCK: link });
    const on = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'on', '--no-workdir', '--json'], env, 60_000, sandbox.dir);
    expect(on.exitCode).toBe(1);
    const { error } = JSON.parse(on.stdout) as { error: { code: string; message: string; remedy: string } };
    expect(error).toEqual({
      code: 'SOCKET_PATH_TOO_LONG',
      message: `ssh-agent is on but SSH_AUTH_SOCK ${link} is 120 bytes, and its real path ${real} is 137: a socket address on linux holds at most 107`,
      remedy: `Link the socket from a shorter path and point SSH_AUTH_SOCK at the link: \`ln -s '${real}' ~/.ssh/agent.sock && export SSH_AUTH_SOCK=~/.ssh/agent.sock\`.`,
    });
    const auto = await cli(['run', '--engine', 'podman', '--', '--rm', '--network', 'none', image, 'sh', '-c', 'echo "sock=${SSH_AUTH_SOCK:-none}"'], env, 60_000);
    expect(auto.stdout).toBe('sock=none');
    expect(auto.stderr).toContain(`SSH_AUTH_SOCK ${link} is 120 bytes`);
    expect(auto.stderr).not.toContain('nothing answers');
  });

  it('exits with the container\'s exit code and releases the session', async () => {
    const { env, image } = await setup();
    const result = await cli(['run', '--quiet', '--engine', 'podman', '--', '--rm', '--network', 'none', image, 'sh', '-c', 'exit 7'], env, 60_000);
    expect(result.exitCode).toBe(7);
    const sessions = await cli(['sessions', 'ls', '--json'], env);
    expect(JSON.parse(sessions.stdout)).toEqual([]);
  });

  it('gives the container GIT_DISCOVERY_ACROSS_FILESYSTEM and no agent when ssh-agent is off', async () => {
    const { env, image } = await setup();
    const result = await cli(
      ['run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', image, 'sh', '-c', 'echo "sock=${SSH_AUTH_SOCK:-none} gd=$GIT_DISCOVERY_ACROSS_FILESYSTEM"'],
      env,
      60_000,
    );
    expect(result.stdout).toBe('sock=none gd=1');
  });

  it('forwards SIGTERM to the engine and exits with the container\'s code', async () => {
    const { env, image } = await setup();
    // The container says it started a second after it did: podman 4.3 (this lab's) installs its signal
    // proxy only once the container has started and its output flows, so a signal in between ends
    // podman instead of reaching the container (newer podman installs it first).
    const child = execa(
      process.execPath,
      [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', image, 'sh', '-c', 'trap "echo got-term; exit 42" TERM; sleep 1; echo started; sleep 30 & wait'],
      { env, reject: false, timeout: 60_000, extendEnv: false },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('started'), 'the container to start', 30_000);
    child.kill('SIGTERM');
    const result = await child;
    expect(result.stdout).toContain('got-term');
    expect(result.exitCode).toBe(42);
    expect(JSON.parse((await cli(['sessions', 'ls', '--json'], env)).stdout)).toEqual([]);
  });

  it('reports ENGINE_NOT_FOUND with exit 127 when the engine is not on PATH', async () => {
    const { env, image } = await setup();
    const result = await cli(['run', '--quiet', '--engine', 'docker', '--', '--rm', image, 'true'], { ...env, PATH: '/nonexistent' });
    expect(result.exitCode).toBe(127);
    expect(result.stderr).toContain('sandboxd: docker was not found on PATH (/nonexistent)');
    expect(result.stderr).toContain('Install docker or add its directory to PATH.');
  });
});
