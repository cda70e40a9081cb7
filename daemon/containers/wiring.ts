import path from 'node:path';
import type { SandboxdPaths } from '../../shared/paths.js';
import { stableHash } from '../ids.js';
import type { Logger } from '../logger.js';
import { findExecutable } from '../executables.js';
import type { ProcessProbe } from '../process-identity.js';
import { ensureSecureDir } from '../secure-dir.js';
import type { Clock } from '../session-registry.js';
import { runSubprocess } from '../subprocess.js';
import { ContainerStore } from './container-store.js';
import { removeLabelled } from './engine-cli.js';
import { SessionContainers } from './session-containers.js';

export interface ContainerWiring {
  paths: SandboxdPaths;
  uid: number;
  hostHome: string;
  probe: ProcessProbe;
  clock: Clock;
  leaseTtlMs: number;
  logger: Logger;
  isLive(sessionId: string): boolean;
}

/**
 * One value per user and state dir: a start-up sweep matches only its own containers, never those
 * of another user on a shared engine or of a second daemon with another SANDBOXD_STATE_DIR.
 */
export function ownerLabel(uid: number, stateDir: string): string {
  return stableHash(`${String(uid)}\0${stateDir}`, 16);
}

/** The real edges of SessionContainers: the records file, the session's engine CLI, the cidfile dir. */
export function createSessionContainers(wiring: ContainerWiring): SessionContainers {
  const logger = wiring.logger.child({ module: 'containers' });
  const store = new ContainerStore(path.join(wiring.paths.stateDir, 'containers'), path.join(wiring.paths.stateDir, 'containers.json'), logger);
  return new SessionContainers({
    dir: path.join(wiring.paths.runtimeDir, 'containers'),
    owner: ownerLabel(wiring.uid, wiring.paths.stateDir),
    probe: wiring.probe,
    clock: wiring.clock,
    isLive: (sessionId) => wiring.isLive(sessionId),
    // A renewing client asks within a heartbeat interval; a cold acquire may take a while more.
    claimWindowMs: 2 * wiring.leaseTtlMs,
    load: () => store.load(),
    save: (records) => store.save(records),
    remove: (record, labels) => removeLabelled(record, labels, { home: wiring.hostHome, run: runSubprocess, findExecutable }),
    ensureDir: (dir) => ensureSecureDir(dir),
    logger,
  });
}
