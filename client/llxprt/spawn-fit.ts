import type { AppliedPlan } from '../apply-plan.js';
import { CONNECTION_NOT_CARRIED, type Fallback } from './fallback.js';

/** The Podman connection `podman` picks by itself in `env`, as far as a client can tell. */
function ownConnection(env: NodeJS.ProcessEnv, platform: NodeJS.Platform, named: string | undefined): string | undefined {
  if ((env.CONTAINER_CONNECTION ?? '') !== '') return env.CONTAINER_CONNECTION;
  // On macOS podman always runs through a connection, and the daemon, asked for none, named the
  // one podman defaults to.
  return platform === 'darwin' ? named : undefined;
}

/**
 * llxprt spawns `<engine> run …` with no engine arguments before `run` and with its own
 * environment (sandbox-exec.ts, executeContainerSandbox), so a plan fits only if its
 * `--connection` is the one podman picks by itself and it passes no variable by name (those take
 * their values from the engine's environment; the adapter never asks for any). Pure.
 */
export function fitsLlxprtSpawn(applied: Pick<AppliedPlan, 'globalArgs' | 'spawnEnv'>, env: NodeJS.ProcessEnv, platform: NodeJS.Platform): Fallback | null {
  const [flag, name, ...rest] = applied.globalArgs;
  if (flag !== undefined && !(flag === '--connection' && rest.length === 0 && name === ownConnection(env, platform, name))) {
    return {
      code: CONNECTION_NOT_CARRIED,
      reason: `the plan runs the container with \`podman ${applied.globalArgs.join(' ')} run\`, a connection llxprt's podman would not choose by itself`,
      remedy: name === undefined ? null : `set CONTAINER_CONNECTION=${name}, or unset SANDBOXD_SSH_BRIDGE`,
    };
  }
  if (Object.keys(applied.spawnEnv).length > 0) {
    return { code: 'INTERNAL', reason: 'the plan passes variables through the engine\'s environment, which llxprt\'s spawn does not set', remedy: null };
  }
  return null;
}
