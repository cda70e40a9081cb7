/** After this, the request that set background work off has long been answered. */
const DELAY_MS = 1_000;

/**
 * Starts background work a request set off once that request has been answered: a refresh of a
 * cached answer spawns git or podman, and each spawn forks the daemon (about 7 ms of its event
 * loop on the CI VM), which the request would otherwise wait behind.
 */
export function later(work: () => void): void {
  setTimeout(work, DELAY_MS).unref();
}
