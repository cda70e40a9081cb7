import { SandboxdError } from '../../shared/errors.js';
import { ENGINE_ENV_NAMES } from '../../shared/contracts/session-routes.js';
import type { Engine } from '../../shared/contracts/common.js';
import type { ClientEnv } from '../../shared/contracts/sessions.js';
import { OWNER_LABEL } from '../os/owner-label.js';
import { clip } from '../os/text.js';
import type { RunSubprocess } from '../os/subprocess.js';

/** The container's session, and the daemon (user + state dir) that owns it. */
export const SESSION_LABEL = 'sandboxd.session';
export { OWNER_LABEL };

/** The engine variables a session's container record keeps (shared/contracts/session-routes.ts). */
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

/** The engine binary on the session's PATH, and the environment it runs with. */
async function engineCommand(target: EngineTarget, deps: EngineCliDeps): Promise<{ binary: string; env: Record<string, string> }> {
  const binary =
    (await deps.findExecutable(target.engine, target.path)) ??
    (target.engine === 'podman' ? await deps.findExecutable('podman-remote', target.path) : null);
  if (binary === null) throw failed(`${target.engine} is not on the session's PATH (${clip(target.path) || '(empty)'})`);
  return { binary, env: { ...target.env, PATH: target.path, HOME: deps.home } };
}

/** Ids of the containers carrying all these label filters (`key=value`, or a bare key). */
async function listLabelled(target: EngineTarget, filters: readonly string[], deps: EngineCliDeps): Promise<string[]> {
  const { binary, env } = await engineCommand(target, deps);
  const args = [...target.globalArgs, 'ps', '-a', '-q', '--no-trunc', ...filters.flatMap((filter) => ['--filter', `label=${filter}`])];
  const result = await deps.run(binary, args, { env, timeoutMs: LIST_TIMEOUT_MS });
  if (result.exitCode !== 0) throw failed(`\`${target.engine} ps\` failed: ${lastLine(result.stderr) || `exit ${String(result.exitCode ?? 'killed')}`}`);
  return result.stdout.split('\n').map((line) => line.trim()).filter((line) => line !== '');
}

/** `rm -f` (podman: `--time 0`); what is still listed afterwards by `left` failed to go. */
async function removeIds(target: EngineTarget, ids: readonly string[], left: () => Promise<string[]>, deps: EngineCliDeps): Promise<void> {
  const { binary, env } = await engineCommand(target, deps);
  const force = target.engine === 'podman' ? ['-f', '--time', '0'] : ['-f'];
  const removed = await deps.run(binary, [...target.globalArgs, 'rm', ...force, ...ids], { env, timeoutMs: REMOVE_TIMEOUT_MS });
  if (removed.exitCode === 0) return;
  // A container that went away by itself meanwhile (`run --rm`) fails rm but is gone all the same.
  const still = new Set(await left());
  const stuck = ids.filter((id) => still.has(id));
  if (stuck.length > 0) throw failed(`\`${target.engine} rm -f ${stuck.join(' ')}\` failed: ${lastLine(removed.stderr) || `exit ${String(removed.exitCode ?? 'killed')}`}`);
}

/**
 * Stops and removes the containers labelled with this session *and* this owner (so a container
 * another daemon or user labelled is never matched), with the session's own engine, PATH and
 * variables, bounded in time. Resolves to the ids removed; throws CONTAINER_REMOVE_FAILED.
 */
export async function removeLabelled(target: EngineTarget, labels: { session: string; owner: string }, deps: EngineCliDeps): Promise<string[]> {
  const list = () => listLabelled(target, [`${SESSION_LABEL}=${labels.session}`, `${OWNER_LABEL}=${labels.owner}`], deps);
  const ids = await list();
  if (ids.length > 0) await removeIds(target, ids, list, deps);
  return ids;
}

/** A session container of this owner, as the engine lists it. */
export interface OwnedContainer {
  id: string;
  /** Its session label. */
  session: string;
  /** Neither running nor paused: created and never started, or exited (podman: also stopped). */
  stopped: boolean;
}

/**
 * `.State.Status` of a container that runs nothing and never will by itself: never started
 * (docker `created`; podman `created`, `configured`, `initialized`) or ended (`exited`, `stopped`,
 * `dead`). Both engines' inspect answer it.
 */
const STOPPED_STATES = new Set(['created', 'configured', 'initialized', 'exited', 'stopped', 'dead']);

/** `{{.Id}} {{.State.Status}} {{session label}}` of these containers; one gone meanwhile is left out. */
async function inspectLabelled(target: EngineTarget, ids: readonly string[], deps: EngineCliDeps): Promise<OwnedContainer[]> {
  const { binary, env } = await engineCommand(target, deps);
  // Both engines' inspect carries the labels as a map; their `ps` formats disagree.
  const format = `{{.Id}} {{.State.Status}} {{index .Config.Labels "${SESSION_LABEL}"}}`;
  const result = await deps.run(binary, [...target.globalArgs, 'inspect', '--type', 'container', '--format', format, ...ids], { env, timeoutMs: LIST_TIMEOUT_MS });
  const found = result.stdout
    .split('\n')
    .map((line) => line.trim().split(' '))
    .flatMap(([id = '', status = '', session = '']) => (ids.includes(id) ? [{ id, session, stopped: STOPPED_STATES.has(status) }] : []));
  // One that went away between ps and inspect fails inspect; the rest are still answered.
  if (result.exitCode !== 0 && found.length === 0) throw failed(`\`${target.engine} inspect\` failed: ${lastLine(result.stderr) || `exit ${String(result.exitCode ?? 'killed')}`}`);
  return found;
}

/**
 * Removes the session's containers (this session *and* this owner) that never started or have
 * exited; one still running is the client's, and is left. Resolves to the ids removed and how many
 * still run.
 */
export async function removeStopped(target: EngineTarget, labels: { session: string; owner: string }, deps: EngineCliDeps): Promise<{ removed: string[]; running: number }> {
  const list = () => listLabelled(target, [`${SESSION_LABEL}=${labels.session}`, `${OWNER_LABEL}=${labels.owner}`], deps);
  const ids = await list();
  if (ids.length === 0) return { removed: [], running: 0 };
  const found = await inspectLabelled(target, ids, deps);
  const stopped = found.filter((container) => container.stopped).map((container) => container.id);
  if (stopped.length > 0) await removeIds(target, stopped, list, deps);
  return { removed: stopped, running: found.length - stopped.length };
}

/**
 * Every session container carrying this owner's label on the target's engine, with its session
 * label (helper containers carry no session label and are not listed).
 */
export async function listOwned(target: EngineTarget, owner: string, deps: EngineCliDeps): Promise<OwnedContainer[]> {
  const ids = await listLabelled(target, [`${OWNER_LABEL}=${owner}`, SESSION_LABEL], deps);
  if (ids.length === 0) return [];
  return (await inspectLabelled(target, ids, deps)).filter((container) => container.session !== '');
}

/** Removes these containers of this owner; what vanished by itself meanwhile counts as removed. */
export function removeOwned(target: EngineTarget, owner: string, ids: readonly string[], deps: EngineCliDeps): Promise<void> {
  return removeIds(target, ids, () => listLabelled(target, [`${OWNER_LABEL}=${owner}`, SESSION_LABEL], deps), deps);
}

/** What a purge removed from one engine. */
export interface Purged {
  containers: string[];
  volumes: string[];
  images: string[];
}

/** The repository sandboxd's own image is imported as (daemon/bridges/relay-image.ts). */
const OWN_IMAGE = 'sandboxd-relay';

async function idsOf(target: EngineTarget, args: readonly string[], what: string, deps: EngineCliDeps): Promise<string[]> {
  const { binary, env } = await engineCommand(target, deps);
  const result = await deps.run(binary, [...target.globalArgs, ...args], { env, timeoutMs: LIST_TIMEOUT_MS });
  if (result.exitCode !== 0) throw failed(`\`${target.engine} ${what}\` failed: ${lastLine(result.stderr) || `exit ${String(result.exitCode ?? 'killed')}`}`);
  return [...new Set(result.stdout.split('\n').map((line) => line.trim()).filter((line) => line !== ''))];
}

/**
 * Everything of this owner on one engine: every container (sessions' and helpers'), every volume,
 * and sandboxd's own image where no container uses it any more (an engine another user shares
 * may still run theirs: its removal is refused, and left). Throws CONTAINER_REMOVE_FAILED.
 */
export async function purgeOwned(target: EngineTarget, owner: string, deps: EngineCliDeps): Promise<Purged> {
  const filter = ['--filter', `label=${OWNER_LABEL}=${owner}`];
  const containers = await idsOf(target, ['ps', '-a', '-q', '--no-trunc', ...filter], 'ps', deps);
  if (containers.length > 0) await removeIds(target, containers, () => idsOf(target, ['ps', '-a', '-q', '--no-trunc', ...filter], 'ps', deps), deps);
  const { binary, env } = await engineCommand(target, deps);
  const volumes = await idsOf(target, ['volume', 'ls', '-q', ...filter], 'volume ls', deps);
  const removedVolumes: string[] = [];
  for (const volume of volumes) {
    const result = await deps.run(binary, [...target.globalArgs, 'volume', 'rm', '-f', volume], { env, timeoutMs: REMOVE_TIMEOUT_MS });
    if (result.exitCode !== 0) throw failed(`\`${target.engine} volume rm ${volume}\` failed: ${lastLine(result.stderr) || `exit ${String(result.exitCode ?? 'killed')}`}`);
    removedVolumes.push(volume);
  }
  const images = await idsOf(target, ['images', '-q', '--no-trunc', '--filter', `reference=${OWN_IMAGE}`], 'images', deps);
  const removedImages: string[] = [];
  for (const image of images) {
    const result = await deps.run(binary, [...target.globalArgs, 'image', 'rm', image], { env, timeoutMs: REMOVE_TIMEOUT_MS });
    if (result.exitCode === 0) removedImages.push(image);
  }
  return { containers, volumes: removedVolumes, images: removedImages };
}
