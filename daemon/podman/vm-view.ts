import { promises as fs } from 'node:fs';
import { later, type Defer } from '../cache/quiet-time.js';
import type { PathKind } from './vm-queries.js';
import type { TunnelIndex } from './tunnel-index.js';
import type { PodmanConnection } from './connections.js';
import { sharedByVolumes, type MachineVolume } from './machine-inspect.js';

/** A VM's sharing changes only with `podman machine init/set` or a remote host's mounts. */
export const VIEW_TTL_MS = 30_000;
/** Past this many remembered answers, expired ones are dropped. */
const MAX_ANSWERS = 4_096;

/** What the VM behind a connection sees of this host's paths, and how that was learned. */
export interface VmSight {
  /** `machine`: from its volumes; `remote`: asked the VM itself. */
  kind: 'machine' | 'remote';
  /** The machine's shared directories (for `machine`), to name in messages. */
  shares: string[];
  seen: Map<string, boolean>;
}

export interface VmViewDeps {
  /** The volumes of the machine behind the connection; null when it is no machine (or podman does not say). */
  machineVolumes(connection: PodmanConnection): Promise<MachineVolume[] | null>;
  /** Running tunnels, whose own connection can answer without a new login. */
  tunnels: Pick<TunnelIndex, 'readyFor'>;
  /** One ssh login that answers for these paths, when no tunnel runs. */
  probe(connection: PodmanConnection, paths: readonly string[]): Promise<Map<string, PathKind>>;
  /** What this host has at a path (d, f, or - when absent). */
  hostKind?(path: string): Promise<PathKind>;
  now(): number;
  /** Starts a look-up past the TTL (the daemon's quiet time); tests run it at once. */
  defer?: Defer;
}

async function statKind(path: string): Promise<PathKind> {
  const stat = await fs.stat(path).catch(() => null);
  if (stat === null) return '-';
  return stat.isDirectory() ? 'd' : 'f';
}

interface MachineEntry {
  at: number;
  volumes: Promise<MachineVolume[] | null>;
  /** Past the TTL: the look-up that replaces this one is under way. */
  refreshing: boolean;
}

function loginKey(connection: PodmanConnection): string {
  const { user, host, port } = connection.target;
  return `${user ?? ''}@${host}:${String(port)}`;
}

/**
 * Knows what a VM sees (DESIGN §6 "Where the container runs"): a Podman machine by its volumes
 * (`podman machine inspect`, no login); any other ssh connection by asking the VM itself, over a
 * running tunnel's own connection, else with one bounded login whose answers are kept per
 * connection and path for VIEW_TTL_MS. A path counts as seen when the VM finds the same kind of
 * thing (directory or file) there: a remote host that merely has a `/root` of its own is a false
 * positive this cannot rule out.
 */
export class VmView {
  private readonly machines = new Map<string, MachineEntry>();
  private readonly answers = new Map<string, { at: number; kind: PathKind }>();

  constructor(private readonly deps: VmViewDeps) {}

  async sees(connection: PodmanConnection, paths: readonly string[]): Promise<VmSight> {
    const unique = [...new Set(paths)];
    const volumes = await this.volumesOf(connection);
    if (volumes !== null) {
      return { kind: 'machine', shares: volumes.map((volume) => volume.source), seen: new Map(unique.map((one) => [one, sharedByVolumes(one, volumes)])) };
    }
    const hostKind = (one: string): Promise<PathKind> => (this.deps.hostKind === undefined ? statKind(one) : this.deps.hostKind(one));
    const [host, vm] = await Promise.all([Promise.all(unique.map(hostKind)), this.ask(connection, unique)]);
    // A path this host does not have is not the VM's to judge (the engine reports it as it would).
    return { kind: 'remote', shares: [], seen: new Map(unique.map((one, index) => [one, host[index] === '-' || vm.get(one) === host[index]])) };
  }

  private prune(): void {
    for (const [key, entry] of this.answers) if (this.deps.now() - entry.at >= VIEW_TTL_MS) this.answers.delete(key);
  }

  /**
   * A machine shares what `podman machine init` or `set` (which takes a restart) gave it: an
   * answer past the TTL still serves the session that finds it so while the next is looked up,
   * so a session started minutes after the last one runs no `podman machine inspect`.
   */
  private volumesOf(connection: PodmanConnection): Promise<MachineVolume[] | null> {
    const key = `${connection.name}\n${connection.uri}`;
    const cached = this.machines.get(key);
    if (cached === undefined) {
      const entry = this.lookUpVolumes(connection);
      this.machines.set(key, entry);
      entry.volumes.catch(() => {
        if (this.machines.get(key) === entry) this.machines.delete(key);
      });
      return entry.volumes;
    }
    if (this.deps.now() - cached.at >= VIEW_TTL_MS && !cached.refreshing) {
      cached.refreshing = true;
      (this.deps.defer ?? later)(() => {
        // Dropped meanwhile (its look-up failed): the next session looks the volumes up itself.
        if (this.machines.get(key) !== cached) return;
        const fresh = this.lookUpVolumes(connection);
        fresh.volumes.then(
          () => {
            if (this.machines.get(key) === cached) this.machines.set(key, fresh);
          },
          () => {
            if (this.machines.get(key) === cached) this.machines.delete(key);
          },
        );
      });
    }
    return cached.volumes;
  }

  private lookUpVolumes(connection: PodmanConnection): MachineEntry {
    return { at: this.deps.now(), volumes: this.deps.machineVolumes(connection), refreshing: false };
  }

  private async ask(connection: PodmanConnection, paths: readonly string[]): Promise<Map<string, PathKind>> {
    const login = loginKey(connection);
    const known = new Map<string, PathKind>();
    for (const one of paths) {
      const cached = this.answers.get(`${login}\n${one}`);
      if (cached !== undefined && this.deps.now() - cached.at < VIEW_TTL_MS) known.set(one, cached.kind);
    }
    const missing = paths.filter((one) => !known.has(one));
    if (missing.length === 0) return known;
    const tunnel = this.deps.tunnels.readyFor(connection);
    const fresh = tunnel === null ? await this.deps.probe(connection, missing) : await tunnel.ask(missing).catch(() => this.deps.probe(connection, missing));
    if (this.answers.size > MAX_ANSWERS) this.prune();
    for (const [one, kind] of fresh) {
      known.set(one, kind);
      this.answers.set(`${login}\n${one}`, { at: this.deps.now(), kind });
    }
    return known;
  }
}
