import { SandboxdError } from '../../shared/errors.js';
import { isRequiredMount, type Mount } from '../../shared/contracts/plan.js';

/** Bridge mounts are placed by their bridge for where the container runs (a tunnel's are VM paths). */
function isBridgeMount(mount: Mount): boolean {
  return mount.purpose === 'ssh agent' || mount.purpose.startsWith('socket ');
}

/** What a Podman machine on a Mac shares unless `podman machine init --volume` said otherwise. */
export const DEFAULT_MACHINE_SHARES = ['/Users', '/private', '/var/folders'] as const;

/** Where the container runs, as messages name it. */
export interface VmSite {
  connection: string;
  kind: 'machine' | 'remote';
  /** A machine's shared directories; empty for a remote host, or a machine whose config was not found. */
  shares: readonly string[];
}

function describeSite(site: VmSite): string {
  return site.kind === 'machine' ? `the VM of Podman machine connection ${site.connection}` : `the remote host of connection ${site.connection}`;
}

function remedyFor(site: VmSite, source: string): string {
  if (site.kind === 'machine') {
    const shared = site.shares.length === 0 ? ` (by default a machine shares ${DEFAULT_MACHINE_SHARES.join(', ')})` : ` (it shares ${site.shares.join(', ')})`;
    return `Share it with the machine (\`podman machine init --volume ${source}:${source}\`, on a new machine) or move the project under a shared directory${shared}.`;
  }
  return `Have the same path on the remote host (copy or mount it there), or run from a directory the remote host has; a remote host sees none of this host's paths.`;
}

/**
 * Keeps the mounts whose source the VM sees (DESIGN §6: with a remote engine every mount source is
 * resolved in the VM). A required one it cannot see fails with MOUNT_NOT_SHARED, the path and the
 * remedy, instead of the engine's `statfs … no such file` (exit 125); an optional one (git config
 * files and includes, known_hosts, cloud credentials) is dropped with a warning naming it.
 */
export function visibleMounts(mounts: readonly Mount[], seen: ReadonlyMap<string, boolean>, site: VmSite): { mounts: Mount[]; warnings: string[] } {
  const kept: Mount[] = [];
  const dropped = new Set<string>();
  const warnings: string[] = [];
  for (const mount of mounts) {
    if (isBridgeMount(mount) || seen.get(mount.source) !== false) {
      kept.push(mount);
      continue;
    }
    // What the session cannot do without (the work tree, the repository's protection) fails the acquire.
    if (isRequiredMount(mount)) {
      throw new SandboxdError('MOUNT_NOT_SHARED', `the ${mount.purpose} ${mount.source} is not visible to ${describeSite(site)}, where the container runs`, { remedy: remedyFor(site, mount.source) });
    }
    // A file mounted at both homes is one thing the VM cannot see: warn once.
    const key = `${mount.purpose}\n${mount.source}`;
    if (dropped.has(key)) continue;
    dropped.add(key);
    warnings.push(`skipped the ${mount.purpose} mount of ${mount.source}: ${describeSite(site)}, where the container runs, cannot see it`);
  }
  return { mounts: kept, warnings };
}

/** The host paths whose visibility decides the plan: every mount source but the bridges'. */
export function sourcesToCheck(mounts: readonly Mount[]): string[] {
  return [...new Set(mounts.filter((mount) => !isBridgeMount(mount)).map((mount) => mount.source))];
}
