import { promises as fs } from 'node:fs';
import path from 'node:path';
import * as z from 'zod/mini';
import { readStateFile } from '../os/state-file.js';
import { FingerprintCache } from '../cache/fingerprint-cache.js';
import type { Defer } from '../cache/quiet-time.js';
import { isLoopback, type PodmanConnection } from './connections.js';
import { machineNameOf, type MachineVolume } from './machine-inspect.js';

/** The providers a Mac's podman keeps machines under (4.x used qemu and applehv, 5.x applehv and libkrun). */
export const MACHINE_PROVIDERS = ['applehv', 'libkrun', 'qemu'] as const;
/** A user has a handful of machines: more files than this in one provider dir are not read. */
const MAX_CONFIG_FILES = 64;
const MAX_CONFIG_BYTES = 256 * 1024;

/**
 * The part of a machine's own config (`<ConfigDir>/<Name>.json`, podman's `vmconfigs.MachineConfig`)
 * that says which connection reaches it and what it shares. `podman machine inspect` prints no
 * volumes, and sees only the current provider's machines, so podman itself maps a connection to
 * its machine from these files by port.
 */
const MachineConfigFile = z.looseObject({
  Name: z.string(),
  SSH: z.looseObject({ Port: z.number() }),
  Mounts: z.optional(z.nullable(z.array(z.looseObject({ Source: z.string(), Target: z.string() })))),
});

export interface MachineConfig {
  /** The file it was read from, to name in logs. */
  file: string;
  name: string;
  port: number;
  volumes: MachineVolume[];
}

/** Where podman keeps each provider's machine configs: `${XDG_CONFIG_HOME:-~/.config}/containers/podman/machine/<provider>`. */
export function machineConfigDirs(env: { XDG_CONFIG_HOME?: string | undefined }, home: string): string[] {
  const xdg = env.XDG_CONFIG_HOME;
  const base = xdg !== undefined && path.isAbsolute(xdg) ? xdg : path.join(home, '.config');
  return MACHINE_PROVIDERS.map((provider) => path.join(base, 'containers', 'podman', 'machine', provider));
}

/** One config file's machine, or null when it is no machine config this reads. */
export function parseMachineConfig(file: string, text: string): MachineConfig | null {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = MachineConfigFile.safeParse(json);
  if (!parsed.success) return null;
  const { Name, SSH, Mounts } = parsed.data;
  return { file, name: Name, port: SSH.Port, volumes: (Mounts ?? []).map((mount) => ({ source: mount.Source, target: mount.Target })) };
}

/**
 * podman's own rule: the machine whose ssh port is the connection's (`<name>` and `<name>-root`
 * share it); several on one port (a stale config) are told apart by name. Only a connection podman
 * calls a machine's, on this host's loopback, has a config here.
 */
export function machineOf(connection: PodmanConnection, configs: readonly MachineConfig[]): MachineConfig | null {
  if (!connection.isMachine || !isLoopback(connection.target.host)) return null;
  const onPort = configs.filter((config) => config.port === connection.target.port);
  if (onPort.length <= 1) return onPort[0] ?? null;
  return onPort.find((config) => config.name === machineNameOf(connection.name)) ?? null;
}

export interface MachineConfigFs {
  readdir(dir: string): Promise<string[]>;
  /** The file's text, or null when it is missing, unreadable or larger than `maxBytes`. */
  readText(file: string, maxBytes: number): Promise<string | null>;
}

export const NODE_MACHINE_CONFIG_FS: MachineConfigFs = {
  readdir: (dir) => fs.readdir(dir).catch(() => []),
  // Podman's files, not ours: refused quietly and left where they are.
  readText: (file, maxBytes) => readStateFile(file, { maxBytes }).catch(() => null),
};

/** Every machine config under the given dirs; unreadable or foreign files are skipped. */
export async function readMachineConfigs(dirs: readonly string[], files: MachineConfigFs = NODE_MACHINE_CONFIG_FS): Promise<MachineConfig[]> {
  const found = await Promise.all(
    dirs.map(async (dir) => {
      const names = (await files.readdir(dir)).filter((name) => name.endsWith('.json')).sort().slice(0, MAX_CONFIG_FILES);
      const configs = await Promise.all(
        names.map(async (name) => {
          const file = path.join(dir, name);
          const text = await files.readText(file, MAX_CONFIG_BYTES);
          return text === null ? null : parseMachineConfig(file, text);
        }),
      );
      return configs.filter((config) => config !== null);
    }),
  );
  return found.flat();
}

export interface MachineLookup {
  connection: PodmanConnection;
  /** The provider dirs of the session's podman (`machineConfigDirs`). */
  dirs: string[];
}

export interface MachineVolumesOptions {
  now(): number;
  /** Backstop for a change the files' stamps miss. */
  ttlMs: number;
  defer?: Defer;
  files?: MachineConfigFs;
}

/**
 * The volumes of the machine behind a connection (null: no config of it found), read again when a
 * provider dir gains or loses a file or the machine's own config changes: a machine made again
 * with other volumes is seen by the next acquire.
 */
export function createMachineVolumes(options: MachineVolumesOptions): (lookup: MachineLookup) => Promise<MachineVolume[] | null> {
  const cache = new FingerprintCache<MachineLookup, MachineConfig | null>({
    compute: async ({ connection, dirs }) => machineOf(connection, await readMachineConfigs(dirs, options.files)),
    key: ({ connection, dirs }) => [connection.name, connection.uri, ...dirs].join('\n'),
    watched: ({ dirs }, machine) => (machine === null ? dirs : [...dirs, machine.file]),
    now: () => options.now(),
    ttlMs: options.ttlMs,
    defer: options.defer,
  });
  return async (lookup) => (lookup.connection.isMachine ? ((await cache.get(lookup))?.volumes ?? null) : null);
}
