import { promises as fs } from 'node:fs';
import path from 'node:path';
import { PURGE_ROUTE, PurgeResponse } from '../shared/contracts/purge.js';
import type { SandboxdPaths } from '../shared/paths.js';
import { ensureDaemon } from './autostart.js';
import { clientPaths } from './connection.js';
import { pickEnv } from './session.js';
import { request } from './transport.js';

/** Each engine gets its `ps`, `rm`, `volume` and `image` calls; a few engines, bounded by theirs. */
const PURGE_TIMEOUT_MS = 180_000;

/**
 * Starts a daemon of this release (the service is gone by now) and has it remove everything of
 * its own on every engine its records name and every engine this shell finds; it stops after
 * answering. Resolves to what it removed and the pid to wait for.
 */
export async function purgeThroughDaemon(env: NodeJS.ProcessEnv): Promise<{ purged: PurgeResponse; pid: number }> {
  const paths = clientPaths(env);
  const status = await ensureDaemon({ paths, env, autoStart: true });
  const purged = await request(
    { socketPath: paths.socketPath, method: 'POST', route: PURGE_ROUTE, body: { path: env.PATH, env: pickEnv(env) }, timeoutMs: PURGE_TIMEOUT_MS, closeConnection: true },
    PurgeResponse,
  );
  return { purged, pid: status.pid };
}

/** A directory a purge may remove whole: sandboxd's own, never the home or what holds it. */
async function whyKept(dir: string, home: string, uid: number): Promise<string | null> {
  const resolved = path.resolve(dir);
  const toHome = path.relative(resolved, path.resolve(home));
  if (resolved === '/' || toHome === '' || (!toHome.startsWith('..') && !path.isAbsolute(toHome))) return `it is your home directory or holds it`;
  const stat = await fs.lstat(resolved).catch(() => null);
  if (stat === null) return null;
  if (!stat.isDirectory()) return 'it is not a directory';
  if (stat.uid !== uid) return `it belongs to uid ${stat.uid}`;
  return null;
}

/**
 * The runtime, state and log directories, each removed whole where it is sandboxd's (as every
 * sandboxd command checks them: the user's own); one that is not, or that holds the home
 * directory (a SANDBOXD_*_DIR pointed at it), is kept and said why. The state dir holds the
 * copies of the user's git config and the records of released sessions: they go with it.
 */
export async function removeOwnDirs(paths: SandboxdPaths, home: string, uid: number, dryRun: boolean): Promise<{ removed: string[]; kept: { dir: string; why: string }[] }> {
  const out: { removed: string[]; kept: { dir: string; why: string }[] } = { removed: [], kept: [] };
  for (const dir of [...new Set([paths.runtimeDir, paths.logDir, paths.stateDir])]) {
    if ((await fs.lstat(dir).catch(() => null)) === null) continue;
    const why = await whyKept(dir, home, uid);
    if (why !== null) {
      out.kept.push({ dir, why });
      continue;
    }
    if (!dryRun) await fs.rm(dir, { recursive: true, force: true });
    out.removed.push(dir);
  }
  return out;
}
