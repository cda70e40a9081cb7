import path from 'node:path';
import type { SandboxdPaths } from '../../shared/paths.js';
import { ownerLabel } from '../os/owner-label.js';
import type { Logger } from '../os/logger.js';
import { findExecutable } from '../os/executables.js';
import type { ProcessProbe } from '../os/process-identity.js';
import type { Defer } from '../cache/quiet-time.js';
import { ensureSecureDir } from '../os/secure-dir.js';
import type { Clock } from '../sessions/session-registry.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { ContainerStore, type DaemonIdentity } from '../containers/container-store.js';
import { listOwned, removeLabelled, removeOwned, removeStopped } from '../containers/engine-cli.js';
import { SessionContainers } from '../sessions/session-containers.js';

export { ownerLabel } from '../os/owner-label.js';

export interface ContainerWiring {
  paths: SandboxdPaths;
  uid: number;
  hostHome: string;
  probe: ProcessProbe;
  clock: Clock;
  /** Runs the session's engine CLI. */
  run: RunSubprocess;
  leaseTtlMs: number;
  logger: Logger;
  /** This daemon: its records name it, and no other daemon acts on them while it runs. */
  identity: DaemonIdentity;
  /** Whether a daemon of an earlier layout answers (it may share this state dir). */
  strayAnswers(): Promise<boolean>;
  /** Runs engine look-ups that no request waits for at a quiet moment. */
  defer: Defer;
  isLive(sessionId: string): boolean;
}

/** After the start-up sweep, containers that no record names are looked for again this often. */
const UNRECORDED_SWEEP_MS = 60 * 60 * 1000;

/** The real edges of SessionContainers: the records file, the session's engine CLI, the cidfile dir. */
export function createSessionContainers(wiring: ContainerWiring): SessionContainers {
  const logger = wiring.logger.child({ module: 'containers' });
  const store = new ContainerStore(path.join(wiring.paths.stateDir, 'containers'), path.join(wiring.paths.stateDir, 'containers.json'), logger);
  const owner = ownerLabel(wiring.uid, wiring.paths.stateDir);
  const engineCli = { home: wiring.hostHome, run: wiring.run, findExecutable };
  return new SessionContainers({
    dir: path.join(wiring.paths.runtimeDir, 'containers'),
    owner,
    self: wiring.identity,
    probe: wiring.probe,
    clock: wiring.clock,
    isLive: (sessionId) => wiring.isLive(sessionId),
    // A renewing client asks within a heartbeat interval; a cold acquire may take a while more.
    claimWindowMs: 2 * wiring.leaseTtlMs,
    unrecordedSweepMs: UNRECORDED_SWEEP_MS,
    defer: wiring.defer,
    strayAnswers: () => wiring.strayAnswers(),
    load: () => store.loadRecords(),
    loadReleased: () => store.loadReleased(),
    save: (records) => store.save(records),
    remove: (record, labels) => removeLabelled(record, labels, engineCli),
    removeStopped: (record, labels) => removeStopped(record, labels, engineCli),
    listOwned: (target) => listOwned(target, owner, engineCli),
    removeOwned: (target, ids) => removeOwned(target, owner, ids, engineCli),
    ensureDir: (dir) => ensureSecureDir(dir),
    logger,
  });
}
