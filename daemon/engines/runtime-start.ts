import type { SubprocessResult } from '../os/subprocess.js';

/** How many times a start the runtime failed is made in all: the last failure stands. */
export const RUNTIME_START_TRIES = 3;

/**
 * The engine's container runtime failed to create or start a container sandboxd asked for: docker's
 * 125 with an "OCI runtime" error. Under load, dockerd and runc can race on a start; it says nothing
 * about what the container was to do, so its caller runs it again, RUNTIME_START_TRIES in all.
 */
export function runtimeStartFailed(result: SubprocessResult): boolean {
  return result.exitCode === 125 && /OCI runtime (create|start) failed/i.test(result.stderr);
}
