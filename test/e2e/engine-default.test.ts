import { mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, makeSandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

type Program = 'podman' | 'docker' | 'git';
/** The real executables (the lab has both engines); each case's PATH holds only what it names. */
const real: Partial<Record<Program, string>> = {};
beforeAll(async () => {
  for (const name of ['podman', 'docker', 'git'] as const) real[name] = (await execa('sh', ['-c', `command -v ${name}`])).stdout.trim();
});

/** A sandbox whose PATH is one directory holding just these programs (by symlink). */
function withPath(programs: readonly Program[], extra: Record<string, string> = {}) {
  const sandbox = makeSandbox(cleanup);
  const bin = path.join(sandbox.dir, 'bin');
  mkdirSync(bin);
  for (const name of programs) symlinkSync(real[name] ?? '', path.join(bin, name));
  return cliEnv(sandbox, { ...podmanLab().env, PATH: bin, ...extra });
}

describe.skipIf(labMissing)('--engine defaults to the engine that is there (real podman and docker CLIs)', () => {
  it('one engine installed: `run` needs no --engine, and -v says which and why', async () => {
    const { image } = podmanLab();
    const env = withPath(['podman', 'git']);
    const result = await cli(['run', '-v', '--quiet', '--ssh-agent', 'off', '--no-workdir', '--', '--rm', '--network', 'none', image, 'echo', 'ran'], env, 60_000);
    expect({ code: result.exitCode, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 0, stdout: 'ran', stderr: 'sandboxd: engine podman (the only engine on PATH)' });
    const status = await cli(['status'], env);
    expect(status.stdout).toContain('  engine:    podman (the only engine on PATH)');
  });

  it('both installed: the one that answers (docker with no daemon behind it does not)', async () => {
    const env = withPath(['podman', 'docker', 'git'], { DOCKER_HOST: 'unix:///nonexistent/docker.sock' });
    const result = await cli(['plan', '-v', '--ssh-agent', 'off', '--json'], env, 60_000);
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: 'sandboxd: engine podman (the one that answers; docker does not)' });
    expect(JSON.parse(result.stdout)).toMatchObject({ session: { engine: 'podman' } });
    const named = await cli(['plan', '-v', '--ssh-agent', 'off', '--json'], { ...env, SANDBOXD_ENGINE: 'docker' }, 60_000);
    expect(named.stderr.split('\n')[0]).toBe('sandboxd: engine docker (set by SANDBOXD_ENGINE)');
  });

  it('none installed: ENGINE_NOT_FOUND with its remedy, exit 127, before any daemon starts', async () => {
    const env = withPath(['git']);
    const result = await cli(['run', '--', '--rm', 'alpine', 'true'], env);
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({
      code: 127,
      stderr: `sandboxd: neither podman nor docker is on PATH (${env.PATH ?? ''})\n  Install Podman or Docker, or add its directory to PATH.`,
    });
    expect((await cli(['status'], env)).exitCode).toBe(3);
  });

  it('a SANDBOXD_ENGINE it does not know is a usage error naming the variable', async () => {
    const env = withPath(['podman', 'git'], { SANDBOXD_ENGINE: 'lxc' });
    const result = await cli(['plan'], env);
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({
      code: 2,
      stderr: 'sandboxd: SANDBOXD_ENGINE is "lxc", which is not an engine sandboxd knows\n  Set SANDBOXD_ENGINE to podman or docker, or unset it.',
    });
  });
});
