import type { Engine } from '../../shared/contracts/common.js';
import type { Mount, Plan } from '../../shared/contracts/plan.js';
import { mountArgs } from './mount-args.js';

export function flattenArgs(plan: Omit<Plan, 'args'>): string[] {
  const args: string[] = [];
  for (const mount of plan.mounts) args.push(...mountArgs(mount));
  // Code-unit order, as for spawnEnv below: a locale's collation loads ICU on the first plan.
  for (const [name, value] of Object.entries(plan.env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    args.push('-e', `${name}=${value}`);
  }
  for (const name of Object.keys(plan.spawnEnv).sort()) args.push('-e', name);
  args.push(...plan.flags);
  return args;
}

export function relabelFor(engine: Engine, platform: 'darwin' | 'linux'): Mount['relabel'] {
  return engine === 'podman' && platform === 'linux' ? 'z' : undefined;
}

/** Two mounts on one target make `run` fail; the first one added wins. */
export function dedupeMounts(mounts: readonly Mount[]): Mount[] {
  const byTarget = new Map<string, Mount>();
  for (const mount of mounts) if (!byTarget.has(mount.target)) byTarget.set(mount.target, mount);
  return [...byTarget.values()];
}
