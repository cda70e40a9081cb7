import { promises as fs } from 'node:fs';
import type { PathKind } from './vm-queries.js';
import type { TunnelIndex } from './tunnel-index.js';
import type { PodmanConnection } from './connections.js';
import { sharedByVolumes, type MachineVolume } from './machine-inspect.js';

/** What a machine's config says, and what a remote host answered, changes only with its mounts. */
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
  /** The volumes of the machine behind a machine connection; null when its config is not found. */
  machineVolumes(connection: PodmanConnection): Promise<MachineVolume[] | null>;
  /** Running tunnels, whose own connection can answer without a new login. */
  tunnels: Pick<TunnelIndex, 'readyFor'>;
  /** One ssh login that answers for these paths, when no tunnel runs. */
  probe(connection: PodmanConnection, paths: readonly string[]): Promise<Map<string, PathKind>>;
  /** What this host has at a path (d, f, or - when absent). */
  hostKind?(path: string): Promise<PathKind>;
  now(): number;
}

async function statKind(path: string): Promise<PathKind> {
  const stat = await fs.stat(path).catch(() => null);
  if (stat === null) return '-';
  return stat.isDirectory() ? 'd' : 'f';
}

function loginKey(connection: PodmanConnection): string {
  const { user, host, port } = connection.target;
  return `${user ?? ''}@${host}:${String(port)}`;
}

/**
 * Knows what a VM sees (DESIGN §6 "Where the container runs"): a Podman machine by the volumes
 * in its own config file (no subprocess, no login); any other ssh connection by asking the VM itself, over a
 * running tunnel's own connection, else with one bounded login whose answers are kept per
 * connection and path for VIEW_TTL_MS. A path counts as seen when the VM finds the same kind of
 * thing (directory or file) there: a remote host that merely has a `/root` of its own is a false
 * positive this cannot rule out.
 */
export class VmView {
  private readonly answers = new Map<string, { at: number; kind: PathKind }>();

  constructor(private readonly deps: VmViewDeps) {}

  async sees(connection: PodmanConnection, paths: readonly string[]): Promise<VmSight> {
    const unique = [...new Set(paths)];
    const volumes = connection.isMachine ? await this.deps.machineVolumes(connection) : null;
    if (volumes !== null) {
      return { kind: 'machine', shares: volumes.map((volume) => volume.source), seen: new Map(unique.map((one) => [one, sharedByVolumes(one, volumes)])) };
    }
    const hostKind = (one: string): Promise<PathKind> => (this.deps.hostKind === undefined ? statKind(one) : this.deps.hostKind(one));
    const [host, vm] = await Promise.all([Promise.all(unique.map(hostKind)), this.ask(connection, unique)]);
    // A path this host does not have is not the VM's to judge (the engine reports it as it would).
    const seen = new Map(unique.map((one, index) => [one, host[index] === '-' || vm.get(one) === host[index]]));
    // A machine whose config was not found is still a machine: messages name its volume settings.
    return { kind: connection.isMachine ? 'machine' : 'remote', shares: [], seen };
  }

  private prune(): void {
    for (const [key, entry] of this.answers) if (this.deps.now() - entry.at >= VIEW_TTL_MS) this.answers.delete(key);
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
