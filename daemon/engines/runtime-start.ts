import type { SubprocessResult } from '../os/subprocess.js';

/** How many times a start the runtime failed is made in all: the last failure stands. */
export const RUNTIME_START_TRIES = 3;

/**
 * The engine's container runtime failed to create or start a container sandboxd asked for: docker's
 * 125 with an "OCI runtime … failed" error, or containerd's "cannot start a stopped process" (the
 * task gone before its start). Under load, dockerd, containerd and runc can race on a start; it
 * says nothing about what the container was to do, so its caller runs it again,
 * RUNTIME_START_TRIES in all.
 */
export function runtimeStartFailed(result: SubprocessResult): boolean {
  return result.exitCode === 125 && /OCI runtime (create|start) failed|cannot start a stopped process/i.test(result.stderr);
}
