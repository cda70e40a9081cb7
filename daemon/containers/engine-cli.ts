import { SandboxdError } from '../../shared/errors.js';
import type { Engine } from '../../shared/contracts/common.js';
import type { ClientEnv } from '../../shared/contracts/sessions.js';
import { clip } from '../clip.js';
import type { RunSubprocess } from '../subprocess.js';

/** The container's session, and the daemon (user + state dir) that owns it. */
export const SESSION_LABEL = 'sandboxd.session';
export const OWNER_LABEL = 'sandboxd.owner';

/**
 * The session's variables that decide which engine, storage or remote host its container is on:
 * `rm -f` must see the same ones as the client's `run` did, and only those (never the daemon's).
 */
export const ENGINE_ENV_NAMES = [
  'CONTAINER_CONNECTION',
  'CONTAINER_HOST',
  'CONTAINER_SSHKEY',
  'CONTAINERS_CONF',
  'CONTAINERS_STORAGE_CONF',
  'PODMAN_CONNECTIONS_CONF',
  'XDG_CONFIG_HOME',
  'DOCKER_HOST',
  'DOCKER_CONTEXT',
  'DOCKER_CONFIG',
] as const satisfies readonly (keyof ClientEnv)[];
export type EngineEnv = Partial<Record<(typeof ENGINE_ENV_NAMES)[number], string>>;

/** How to reach the engine a session's container runs on. */
export interface EngineTarget {
  engine: Engine;
  /** The session's PATH, where the engine binary is found. */
  path: string;
  env: EngineEnv;
  /** What the plan put before `run` (e.g. `--connection NAME`). */
  globalArgs: string[];
}

export function engineEnv(clientEnv: ClientEnv): EngineEnv {
  const picked: EngineEnv = {};
  for (const name of ENGINE_ENV_NAMES) {
    const value = clientEnv[name];
    if (value !== undefined) picked[name] = value;
  }
  return picked;
}

export interface EngineCliDeps {
  /** The daemon user's home: podman and docker find their per-user config under it. */
  home: string;
  run: RunSubprocess;
  findExecutable(name: string, searchPath: string): Promise<string | null>;
}

const LIST_TIMEOUT_MS = 10_000;
/** `rm -f` kills at once (podman: `--time 0`), so this bounds an engine that hangs. */
const REMOVE_TIMEOUT_MS = 15_000;

function failed(message: string): SandboxdError {
  return new SandboxdError('CONTAINER_REMOVE_FAILED', message);
}

function lastLine(text: string): string {
  return clip(text.trim().split('\n').pop() ?? '');
}

/**
 * Stops and removes the containers labelled with this session *and* this owner (so a container
 * another daemon or user labelled is never matched), with the session's own engine, PATH and
 * variables, bounded in time. Resolves to the ids removed; throws CONTAINER_REMOVE_FAILED.
 */
export async function removeLabelled(target: EngineTarget, labels: { session: string; owner: string }, deps: EngineCliDeps): Promise<string[]> {
  const binary =
    (await deps.findExecutable(target.engine, target.path)) ??
    (target.engine === 'podman' ? await deps.findExecutable('podman-remote', target.path) : null);
  if (binary === null) throw failed(`${target.engine} is not on the session's PATH (${clip(target.path) || '(empty)'})`);
  const options = { env: { ...target.env, PATH: target.path, HOME: deps.home } };
  const list = async (): Promise<string[]> => {
    const filters = ['--filter', `label=${SESSION_LABEL}=${labels.session}`, '--filter', `label=${OWNER_LABEL}=${labels.owner}`];
    const result = await deps.run(binary, [...target.globalArgs, 'ps', '-a', '-q', '--no-trunc', ...filters], { ...options, timeoutMs: LIST_TIMEOUT_MS });
    if (result.exitCode !== 0) throw failed(`\`${target.engine} ps\` failed: ${lastLine(result.stderr) || `exit ${String(result.exitCode ?? 'killed')}`}`);
    return result.stdout.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  };
  const ids = await list();
  if (ids.length === 0) return [];
  const force = target.engine === 'podman' ? ['-f', '--time', '0'] : ['-f'];
  const removed = await deps.run(binary, [...target.globalArgs, 'rm', ...force, ...ids], { ...options, timeoutMs: REMOVE_TIMEOUT_MS });
  if (removed.exitCode !== 0) {
    // A container that went away by itself meanwhile (`run --rm`) fails rm but is gone all the same.
    const left = await list();
    if (left.length > 0) throw failed(`\`${target.engine} rm -f ${left.join(' ')}\` failed: ${lastLine(removed.stderr) || `exit ${String(removed.exitCode ?? 'killed')}`}`);
  }
  return ids;
}
