import * as z from 'zod/mini';
import { AbsolutePath } from './common.js';

export const Mount = z.strictObject({
  source: AbsolutePath,
  target: AbsolutePath,
  readOnly: z.boolean(),
  /** SELinux relabel for Podman on Linux (`:z`); absent for Docker and inside a VM. */
  relabel: z.optional(z.enum(['z'])),
  /** Why the mount is there, for people reading `sandboxd plan`. */
  purpose: z.string().check(z.maxLength(200)),
});
export type Mount = z.infer<typeof Mount>;

/** Every mount of a repository's protection (the sandbox's git dir, what lies read-only over it and in the work tree) is named so. */
export const REPOSITORY_PURPOSE_PREFIX = 'repository ';

/** Mounts a session cannot do without: one that cannot be made (or a VM cannot see) fails the acquire, never drops it. */
const REQUIRED_PURPOSES = new Set(['workdir', 'requested mount', 'ssh agent']);

export function isRequiredMount(mount: Pick<Mount, 'purpose'>): boolean {
  return REQUIRED_PURPOSES.has(mount.purpose) || mount.purpose.startsWith(REPOSITORY_PURPOSE_PREFIX);
}

export const Plan = z.strictObject({
  mounts: z.array(Mount),
  /** Variables set in the container; values here are not secret (they appear on the engine's argv). */
  env: z.record(z.string(), z.string()),
  /**
   * Variables passed by name only (`-e NAME`): the engine process must carry these values in its own
   * environment, so they never appear on a command line (`ps`).
   */
  spawnEnv: z.record(z.string(), z.string()),
  /** Global engine arguments that go before `run`, e.g. `--connection X` for a remote Podman. */
  globalArgs: z.array(z.string()),
  /** Extra `run` flags that are not mounts or env, e.g. `--security-opt label=disable`. */
  flags: z.array(z.string()),
  /** mounts, env (and `-e NAME` for spawnEnv) and flags flattened in that order, ready to splice after `run`. */
  args: z.array(z.string()),
  /** What will fail or differ in the container, each with what fixes it: printed on every run. */
  warnings: z.array(z.string()),
  /**
   * What sandboxd set for the container that needs no action (each override it makes, such as
   * git's safe.directory): printed by `plan` and `run -v`, never on a plain run.
   */
  notices: z.array(z.string()),
});
export type Plan = z.infer<typeof Plan>;

export { AGENT_NOT_FORWARDED, AGENT_REMEDY, agentNotForwarded } from '../agent-warning.js';

export const SshBridgeKind = z.enum(['mount', 'tunnel', 'desktop']);
export type SshBridgeKind = z.infer<typeof SshBridgeKind>;

export const SshStatus = z.discriminatedUnion('status', [
  z.strictObject({
    status: z.literal('forwarded'),
    bridge: SshBridgeKind,
    /** SSH_AUTH_SOCK inside the container. */
    socket: AbsolutePath,
    /** The host agent socket that is served (realpath). */
    hostAgentSocket: AbsolutePath,
    bridgeId: z.string(),
  }),
  z.strictObject({ status: z.literal('skipped'), reason: z.string() }),
]);
export type SshStatus = z.infer<typeof SshStatus>;
