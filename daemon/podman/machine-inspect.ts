import path from 'node:path';
import * as z from 'zod/mini';
import type { RunSubprocess } from '../os/subprocess.js';
import type { PodmanConnection } from './connections.js';

const INSPECT_TIMEOUT_MS = 10_000;

/** The part of `podman machine inspect` that says what the VM shares (podman 5 always prints Mounts). */
const MachineInspect = z.array(
  z.looseObject({
    Name: z.string(),
    Mounts: z.optional(z.nullable(z.array(z.looseObject({ Source: z.string(), Target: z.string() })))),
  }),
);

export interface MachineVolume {
  source: string;
  target: string;
}

/** A machine's connections are `<machine>` and `<machine>-root`. */
export function machineNameOf(connection: string): string {
  return connection.endsWith('-root') ? connection.slice(0, -'-root'.length) : connection;
}

/**
 * The volumes of the machine behind a connection, or null when it is not a machine, or a podman
 * that does not list them: then only the VM itself can say what it sees.
 */
export function parseMachineVolumes(stdout: string): MachineVolume[] | null {
  let json: unknown;
  try {
    json = JSON.parse(stdout);
  } catch {
    return null;
  }
  const parsed = MachineInspect.safeParse(json);
  const mounts = parsed.success ? parsed.data[0]?.Mounts : undefined;
  if (mounts === undefined || mounts === null) return null;
  return mounts.map((mount) => ({ source: mount.Source, target: mount.Target }));
}

/** Whether the VM sees `hostPath` at the same path: it lies in a volume mounted where it is on the host. */
export function sharedByVolumes(hostPath: string, volumes: readonly MachineVolume[]): boolean {
  return volumes.some(({ source, target }) => {
    if (path.posix.normalize(source) !== path.posix.normalize(target)) return false;
    const relative = path.posix.relative(source, hostPath);
    return relative === '' || (!relative.startsWith('..') && !path.posix.isAbsolute(relative));
  });
}

export interface MachineInspectDeps {
  run: RunSubprocess;
  /** The session's podman binary, PATH and podman variables, as discovery used them. */
  podman: string;
  env: Record<string, string>;
}

/** Runs `podman machine inspect <machine>`; null when the connection is no machine this podman knows. */
export async function machineVolumes(connection: PodmanConnection, deps: MachineInspectDeps): Promise<MachineVolume[] | null> {
  if (connection.isMachine === false) return null;
  const result = await deps.run(deps.podman, ['machine', 'inspect', machineNameOf(connection.name)], { env: deps.env, timeoutMs: INSPECT_TIMEOUT_MS });
  return result.exitCode === 0 ? parseMachineVolumes(result.stdout) : null;
}
