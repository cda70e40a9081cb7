import { chmodSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cli, cliEnv, makeSandbox, startAgent } from '../helpers.js';
import { commitComesHome, plainRepo } from './git-lab.js';
import { dockerLabUnavailable, startDockerd, type Dockerd } from '../lab/dockerd.js';
import { lab } from './lab.js';

const unavailable = dockerLabUnavailable(lab);
const fileCleanup = new Cleanup();
let dockerd: Dockerd;

beforeAll(async () => {
  if (unavailable === null) dockerd = await startDockerd('engine', lab, fileCleanup);
}, 180_000);
afterAll(() => fileCleanup.run(), 120_000);

describe.skipIf(unavailable !== null && process.env.CI === undefined)('sandboxd run --engine docker against a real Docker Engine on this host', () => {
  const cleanup = new Cleanup();
  afterAll(() => cleanup.run());

  async function setup() {
    if (unavailable !== null) throw new Error(`the docker lab is not available: ${unavailable}`);
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    return { env: cliEnv(sandbox, { SSH_AUTH_SOCK: agent.socket, DOCKER_HOST: dockerd.host }), agent };
  }

  it.each([
    ['root', []],
    ['--user 1000', ['--user', '1000:1000']],
  ])('identifies Docker Engine, relays the agent: ssh-add -l lists the key as %s, and git works', async (_name, userArgs) => {
    const { env, agent } = await setup();
    const script = 'ssh-add -l && cd /tmp && git init -q r && git -C r -c user.name=t -c user.email=t@e commit -q --allow-empty -m x && git -C r log --format=%s';
    const result = await cli(['run', '--quiet', '--engine', 'docker', '--', '--rm', '--network', 'none', ...userArgs, dockerd.image, 'sh', '-c', script], env, 90_000);
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.stdout.split('\n').at(-1)).toBe('x');
    expect(result.exitCode).toBe(0);
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { engines: { kind: string; bridge: string; endpoint: string; probe: unknown }[] };
    expect(status.engines).toEqual([expect.objectContaining({ kind: 'docker-engine', bridge: 'relay', endpoint: dockerd.host, probe: null })]);
  });

  it.each([
    ['root', [], '0:0'],
    ['--user 1000', ['--user', '1000:1000'], '1000:1000'],
  ])("as %s, a commit made in the sandbox's own git dir comes home; a reflog planted as a link writes no host file", async (_name, userArgs, owner) => {
    const { env } = await setup();
    const src = path.join(env.SANDBOXD_STATE_DIR ?? '', '..', 'src');
    const dir = await plainRepo(path.join(src, `repo-${owner.replace(':', '-')}`), owner);
    chmodSync(path.dirname(src), 0o755);
    await commitComesHome(dir, path.join(src, 'bashrc'), (script) =>
      execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'docker', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', ...userArgs, dockerd.image, 'sh', '-c', script], { cwd: dir, env, extendEnv: false, reject: false, timeout: 90_000 }),
    );
  });

  it('an engine that is down fails the session with the remedy for this host, before any run that cannot start; one not asked is left to docker', async () => {
    const { env } = await setup();
    const down = { ...env, DOCKER_HOST: 'unix:///run/sbx-nothing-here.sock' };
    const failure = {
      error: {
        code: 'DOCKER_INFO_FAILED',
        message: expect.stringContaining('Cannot connect to the Docker daemon at unix:///run/sbx-nothing-here.sock') as string,
        // Where Docker runs as a service: starting it is the remedy, never Docker Desktop.
        remedy: 'Start the Docker service: `sudo systemctl start docker` (rootless Docker: `systemctl --user start docker`), or point DOCKER_HOST / DOCKER_CONTEXT at an engine that runs.',
      },
    };
    // The engine carries the agent, or (the agent off) the session's git credential socket.
    for (const carried of [['--ssh-agent', 'auto'], ['--ssh-agent', 'on'], ['--ssh-agent', 'off', '--git-credentials', 'github.com']]) {
      const plan = await cli(['plan', '--engine', 'docker', ...carried, '--json'], down);
      expect({ carried, code: plan.exitCode, out: JSON.parse(plan.stdout) as unknown }).toEqual({ carried, code: 1, out: failure });
    }
    const run = await cli(['run', '--engine', 'docker', '--', '--rm', dockerd.image, 'true'], down);
    expect({ code: run.exitCode, stdout: run.stdout }).toEqual({ code: 1, stdout: '' });
    expect(run.stderr).toContain('sudo systemctl start docker');
    // Nothing of the engine is needed without an agent it carries, as root: docker's own run says it is down.
    expect((await cli(['plan', '--engine', 'docker', '--ssh-agent', 'off', '--json'], down)).exitCode).toBe(0);
  });

  it('no docker on the session\'s PATH: ENGINE_NOT_FOUND under on, naming the PATH searched', async () => {
    const { env } = await setup();
    const on = await cli(['plan', '--engine', 'docker', '--ssh-agent', 'on', '--json'], { ...env, PATH: '/nonexistent' });
    expect(JSON.parse(on.stdout)).toEqual({
      error: { code: 'ENGINE_NOT_FOUND', message: 'docker is not on the session\'s PATH (searched: /nonexistent)', remedy: 'Install the docker CLI, or make sure the PATH of the calling shell contains it.' },
    });
  });
});
