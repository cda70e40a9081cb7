import { OWNER_LABEL } from '../containers/engine-cli.js';
import type { Logger } from '../os/logger.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { HELPER_LABEL, type HelperRecord, type HelperRecords } from './helper-records.js';

const LIST_TIMEOUT_MS = 10_000;
const REMOVE_TIMEOUT_MS = 15_000;

export interface LeftoverDeps {
  run: RunSubprocess;
  /** This daemon's owner label (user and state dir): only helpers carrying it are touched. */
  owner: string;
  records: HelperRecords;
  /** Helpers the sockets of the previous daemon's live sessions still need: left running. */
  keep: readonly string[];
  logger: Logger;
}

type Engine = Pick<HelperRecord, 'docker' | 'env'>;

function envOf(engine: Engine): Record<string, string> {
  return Object.fromEntries(Object.entries(engine.env));
}

function lines(text: string): string[] {
  return text.split('\n').map((line) => line.trim()).filter((line) => line !== '');
}

/**
 * Removes every helper container, then every helper volume, carrying this daemon's owner label on
 * one engine, but those it keeps. True when none is left; a volume a running session container
 * still mounts stays (the engine refuses), and is tried again by the next start-up.
 */
async function removeOn(engine: Engine, deps: LeftoverDeps): Promise<boolean> {
  const options = { env: envOf(engine), timeoutMs: LIST_TIMEOUT_MS };
  const filters = ['--filter', `label=${OWNER_LABEL}=${deps.owner}`, '--filter', `label=${HELPER_LABEL}`];
  const keep = new Set(deps.keep);
  const containers = await deps.run(engine.docker, ['ps', '--all', '--no-trunc', '--format', '{{.ID}} {{.Names}}', ...filters], options);
  if (containers.exitCode !== 0) return false;
  const ids = lines(containers.stdout).map((line) => line.split(' ')).filter(([, name]) => !keep.has(name ?? '')).map(([id]) => id ?? '');
  if (ids.length > 0 && (await deps.run(engine.docker, ['rm', '--force', ...ids], { ...options, timeoutMs: REMOVE_TIMEOUT_MS })).exitCode !== 0) return false;
  const volumes = await deps.run(engine.docker, ['volume', 'ls', '--quiet', ...filters], options);
  if (volumes.exitCode !== 0) return false;
  const removable = lines(volumes.stdout).filter((volume) => !keep.has(volume));
  let left = 0;
  for (const volume of removable) {
    if ((await deps.run(engine.docker, ['volume', 'rm', volume], options)).exitCode !== 0) left += 1;
  }
  deps.logger.info({ containers: ids.length, volumes: removable.length - left, left, kept: keep.size }, 'removed helpers a previous daemon left');
  return left === 0;
}

/**
 * At start-up, the relay containers and volumes a daemon that was killed left behind (DESIGN §7),
 * on every engine its records name. Never another owner's: the owner label is on each filter.
 */
export async function removeLeftoverHelpers(deps: LeftoverDeps): Promise<void> {
  const byEngine = new Map<string, HelperRecord[]>();
  for (const record of await deps.records.load()) {
    const key = JSON.stringify([record.docker, record.env]);
    byEngine.set(key, [...(byEngine.get(key) ?? []), record]);
  }
  for (const records of byEngine.values()) {
    const [engine] = records;
    if (engine === undefined) continue;
    const done = await removeOn(engine, deps).catch((error: unknown) => {
      deps.logger.warn({ err: error, docker: engine.docker }, 'cannot remove helpers a previous daemon left');
      return false;
    });
    if (done) await deps.records.forget(records.map((record) => record.name).filter((name) => !deps.keep.includes(name)));
  }
}
