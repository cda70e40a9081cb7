import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createDaemon, type Daemon } from '../../daemon/composition/daemon.js';
import { DEFAULT_SETTINGS, type DaemonDeps, type DaemonSettings } from '../../daemon/composition/daemon-deps.js';
import { realEdges, type DaemonEdges } from '../../daemon/composition/edges.js';
import type { ProcessProbe } from '../../daemon/os/process-identity.js';
import { createLogger } from '../../daemon/os/logger.js';
import { resolvePaths } from '../../shared/paths.js';
import type { Cleanup } from '../helpers.js';

const EVERY_PID_ALIVE: ProcessProbe = {
  cheapStartTime: true,
  startTime: () => Promise.resolve('1'),
  isSame: () => Promise.resolve(true),
  startTimes: (pids) => Promise.resolve(new Map(pids.map((pid) => [pid, '1']))),
};

/**
 * The whole daemon in memory (STYLE 4), its dirs in `dir`; by default every client pid counts as
 * alive and the edges are the real ones, `edges` swapping some of them.
 */
export function memoryDaemon(dir: string, settings: Partial<DaemonSettings> = {}, probe: ProcessProbe = EVERY_PID_ALIVE, edges: Partial<DaemonEdges> = {}, deps: Partial<DaemonDeps> = {}): Daemon {
  const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: dir }, uid: 0, home: dir });
  return createDaemon({
    edges: { ...realEdges(paths), ...edges },
    platform: 'linux',
    paths,
    hostHome: dir,
    probe,
    logger: createLogger({ kind: 'silent' }),
    logPath: null,
    settings: { ...DEFAULT_SETTINGS, ...settings },
    uid: 0,
    identity: { pid: process.pid, startTime: null },
    strayAnswers: () => Promise.resolve(false),
    requestShutdown: () => undefined,
    onTunnelChild: () => undefined,
    ...deps,
  });
}

/** The daemon in memory listening on a real Unix socket (the client's own transport), recording every request it gets. */
export async function listeningMemoryDaemon(prefix: string, cleanup: Cleanup): Promise<{ daemon: Daemon; socketPath: string; requests: string[] }> {
  const dir = mkdtempSync(prefix);
  const daemon = memoryDaemon(dir);
  const requests: string[] = [];
  daemon.app.addHook('onRequest', (request, _reply, done) => {
    requests.push(`${request.method} ${request.url}`);
    done();
  });
  const socketPath = path.join(dir, 's.sock');
  await daemon.app.listen({ path: socketPath });
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  cleanup.add(() => daemon.close());
  return { daemon, socketPath, requests };
}
