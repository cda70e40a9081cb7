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
    const child = execa(
      process.execPath,
      [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', image, 'sh', '-c', 'trap "echo got-term; exit 42" TERM; echo started; sleep 30 & wait'],
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
