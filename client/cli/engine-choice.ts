import { findExecutable } from '../../daemon/os/executables.js';
import type { Engine } from '../../shared/contracts/common.js';
import { ENGINES } from '../../shared/contracts/session-routes.js';
import { SandboxdError } from '../../shared/errors.js';

export interface EngineChoice {
  engine: Engine;
  /** Why this one, as `-v` and `status` print it. */
  why: string;
}

/** The edges the choice needs, injected so tests decide what is installed and what answers. */
export interface EngineProbes {
  /** The engine's executable on the session's PATH, or null. */
  find: (engine: Engine) => Promise<string | null>;
  /** Whether the engine's daemon or machine answers (`<engine> version` reaching its server). */
  answers: (engine: Engine) => Promise<boolean>;
}

const ORDER: readonly Engine[] = ['podman', 'docker'];
/** A stopped Podman machine or Docker daemon fails at once; a hung one must not hold `run` up. */
const ANSWER_TIMEOUT_MS = 5_000;

function isEngine(name: string): name is Engine {
  return (ENGINES as readonly string[]).includes(name);
}

/** What is settled without asking an engine anything; `both` when only asking them can settle it. */
export async function engineWithoutAsking(flag: Engine | undefined, env: NodeJS.ProcessEnv, find: EngineProbes['find']): Promise<EngineChoice | 'both'> {
  if (flag !== undefined) return { engine: flag, why: 'given with --engine' };
  const named = env.SANDBOXD_ENGINE;
  if (named !== undefined && named !== '') {
    if (!isEngine(named)) {
      throw new SandboxdError('USAGE', `SANDBOXD_ENGINE is "${named}", which is not an engine sandboxd knows`, {
        remedy: 'Set SANDBOXD_ENGINE to podman or docker, or unset it.',
      });
    }
    return { engine: named, why: 'set by SANDBOXD_ENGINE' };
  }
  const found = await Promise.all(ORDER.map(async (engine) => ({ engine, path: await find(engine) })));
  const installed = found.filter((entry) => entry.path !== null).map((entry) => entry.engine);
  const [first, second] = installed;
  if (first === undefined) {
    throw new SandboxdError('ENGINE_NOT_FOUND', `neither podman nor docker is on PATH (${env.PATH ?? ''})`, {
      remedy: 'Install Podman or Docker, or add its directory to PATH.',
    });
  }
  return second === undefined ? { engine: first, why: 'the only engine on PATH' } : 'both';
}

/**
 * `--engine`, else `SANDBOXD_ENGINE`, else the engine that is there: the only one on PATH, or,
 * with both, the one whose server answers (podman first when both do, since a local podman
 * always answers). With none, the session could not run anyway: ENGINE_NOT_FOUND says so.
 */
export async function chooseEngine(flag: Engine | undefined, env: NodeJS.ProcessEnv, probes: EngineProbes): Promise<EngineChoice> {
  const settled = await engineWithoutAsking(flag, env, probes.find);
  if (settled !== 'both') return settled;
  const answering = await Promise.all(ORDER.map((engine) => probes.answers(engine)));
  const index = answering.indexOf(true);
  const chosen = ORDER[index] ?? 'podman';
  if (index < 0) return { engine: chosen, why: 'podman and docker are on PATH and neither answers; set SANDBOXD_ENGINE or pass --engine to pick one' };
  const other = ORDER.find((engine) => engine !== chosen) ?? '';
  return { engine: chosen, why: answering.every(Boolean) ? `podman and docker both answer; set SANDBOXD_ENGINE=${other} for the other` : `the one that answers; ${other} does not` };
}

/** The real edges: the caller's PATH, and the engine's own `version`, bounded. */
export function systemProbes(env: NodeJS.ProcessEnv): EngineProbes {
  return {
    find: (engine) => findExecutable(engine, env.PATH),
    answers: async (engine) => {
      const { execFile } = await import('node:child_process');
      return new Promise((resolve) => {
        execFile(engine, ['version', '--format', '{{.Server.Version}}'], { env, timeout: ANSWER_TIMEOUT_MS }, (error, stdout) => {
          resolve(error === null && stdout.trim() !== '');
        });
      });
    },
  };
}
