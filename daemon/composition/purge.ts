import type { PurgeRequest, PurgeResponse } from '../../shared/contracts/purge.js';
import { engineEnv, purgeOwned, type EngineCliDeps, type EngineTarget } from '../containers/engine-cli.js';
import type { Logger } from '../os/logger.js';
import type { SessionContainers } from '../sessions/session-containers.js';
import type { SessionRegistry } from '../sessions/session-registry.js';
import type { AgentBridges } from './agent-bridges.js';
import type { TrackedWork } from './background.js';

export interface PurgeDeps {
  registry: SessionRegistry;
  containers: Pick<SessionContainers, 'targets'>;
  bridges: Pick<AgentBridges, 'removeAll'>;
  /** The container removals that ending the sessions set off. */
  work: TrackedWork;
  owner: string;
  engineCli: EngineCliDeps;
  logger: Logger;
}

/** The client's podman and docker: engines no record may name yet (a doctor run, a session of an earlier state). */
function clientTargets(request: PurgeRequest): EngineTarget[] {
  const env = engineEnv(request.env ?? {});
  return (['podman', 'docker'] as const).map((engine) => ({ engine, path: request.path ?? '', env, globalArgs: [] }));
}

/**
 * `sandboxd uninstall --purge`: every session ends and its container goes, every bridge stops and
 * its helpers go, then every container, volume and image of this owner is removed from each engine
 * the records name and each the client finds. An engine that does not answer is a failure line,
 * and the others are still purged.
 */
export async function purgeAll(request: PurgeRequest, deps: PurgeDeps): Promise<PurgeResponse> {
  deps.registry.endAll('removed');
  await deps.work.settled();
  const failures: string[] = [];
  await deps.bridges.removeAll().catch((error: unknown) => {
    failures.push(`helpers: ${error instanceof Error ? error.message : String(error)}`);
  });
  const seen = new Set<string>();
  const out: PurgeResponse = { containers: [], volumes: [], images: [], failures, unreached: [] };
  const recorded = await deps.containers.targets();
  for (const target of [...recorded, ...clientTargets(request)]) {
    const key = JSON.stringify([target.engine, target.path, Object.entries(target.env).sort(), target.globalArgs]);
    if (seen.has(key)) continue;
    seen.add(key);
    const named = recorded.includes(target);
    if ((await deps.engineCli.findExecutable(target.engine, target.path)) === null) continue;
    try {
      const purged = await purgeOwned(target, deps.owner, deps.engineCli);
      out.containers.push(...purged.containers);
      out.volumes.push(...purged.volumes);
      out.images.push(...purged.images);
    } catch (error) {
      // An engine only found on PATH (docker installed, its service stopped) held nothing sandboxd knows of.
      (named ? failures : out.unreached).push(error instanceof Error ? error.message : String(error));
    }
  }
  deps.logger.info({ containers: out.containers.length, volumes: out.volumes.length, images: out.images.length, failures }, 'purged');
  return out;
}
