import { describe, expect, it } from 'vitest';
import { chooseEngine, type EngineProbes } from '../../client/cli/engine-choice.js';
import type { Engine } from '../../shared/contracts/common.js';
import { SandboxdError } from '../../shared/errors.js';

/** What is installed and which servers answer, as the test says. */
function probes(installed: readonly Engine[], answering: readonly Engine[]): EngineProbes & { asked: Engine[] } {
  const asked: Engine[] = [];
  return {
    asked,
    find: (engine) => Promise.resolve(installed.includes(engine) ? `/usr/bin/${engine}` : null),
    answers: (engine) => {
      asked.push(engine);
      return Promise.resolve(answering.includes(engine));
    },
  };
}

describe('the default engine', () => {
  it('--engine wins, then SANDBOXD_ENGINE, and neither asks anything', async () => {
    const none = probes([], []);
    expect(await chooseEngine('docker', { SANDBOXD_ENGINE: 'podman' }, none)).toEqual({ engine: 'docker', why: 'given with --engine' });
    expect(await chooseEngine(undefined, { SANDBOXD_ENGINE: 'docker' }, none)).toEqual({ engine: 'docker', why: 'set by SANDBOXD_ENGINE' });
    expect(none.asked).toEqual([]);
  });

  it('a SANDBOXD_ENGINE it does not know is a usage error naming the variable', async () => {
    const error = await chooseEngine(undefined, { SANDBOXD_ENGINE: 'lxc' }, probes(['podman'], ['podman'])).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(SandboxdError);
    expect(error).toMatchObject({ code: 'USAGE', message: 'SANDBOXD_ENGINE is "lxc", which is not an engine sandboxd knows', remedy: 'Set SANDBOXD_ENGINE to podman or docker, or unset it.' });
  });

  it.each([['podman'], ['docker']] as const)('one engine installed (%s): that one, without asking it', async (engine) => {
    const one = probes([engine], []);
    expect(await chooseEngine(undefined, {}, one)).toEqual({ engine, why: 'the only engine on PATH' });
    expect(one.asked).toEqual([]);
  });

  it('both installed: the one that answers', async () => {
    expect(await chooseEngine(undefined, {}, probes(['podman', 'docker'], ['docker']))).toEqual({ engine: 'docker', why: 'the one that answers; podman does not' });
    expect(await chooseEngine(undefined, {}, probes(['podman', 'docker'], ['podman']))).toEqual({ engine: 'podman', why: 'the one that answers; docker does not' });
    expect(await chooseEngine(undefined, {}, probes(['podman', 'docker'], ['podman', 'docker']))).toEqual({ engine: 'podman', why: 'podman and docker both answer; set SANDBOXD_ENGINE=docker for the other' });
    expect((await chooseEngine(undefined, {}, probes(['podman', 'docker'], []))).engine).toBe('podman');
  });

  it('none installed: ENGINE_NOT_FOUND, naming the PATH it looked in', async () => {
    const error = await chooseEngine(undefined, { PATH: '/usr/bin:/bin' }, probes([], [])).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'ENGINE_NOT_FOUND', message: 'neither podman nor docker is on PATH (/usr/bin:/bin)', remedy: 'Install Podman or Docker, or add its directory to PATH.' });
  });
});
