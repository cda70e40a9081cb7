import path from 'node:path';

/** A directory a Podman machine shares: `source` on this host appears at `target` in the VM. */
export interface MachineVolume {
  source: string;
  target: string;
}

/** A machine's connections are `<machine>` and `<machine>-root`. */
export function machineNameOf(connection: string): string {
  return connection.endsWith('-root') ? connection.slice(0, -'-root'.length) : connection;
}

/** Whether the VM sees `hostPath` at the same path: it lies in a volume mounted where it is on the host. */
export function sharedByVolumes(hostPath: string, volumes: readonly MachineVolume[]): boolean {
  return volumes.some(({ source, target }) => {
    if (path.posix.normalize(source) !== path.posix.normalize(target)) return false;
    const relative = path.posix.relative(source, hostPath);
    return relative === '' || (!relative.startsWith('..') && !path.posix.isAbsolute(relative));
  });
}
