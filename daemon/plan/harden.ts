/**
 * Enough processes for a build with many threads (the limit counts threads), few enough to stop a
 * fork bomb; the same default podman uses.
 */
export const HARDEN_PIDS_LIMIT = 2048;

/**
 * The opt-in hardened profile, as `run` flags: a read-only root (so nothing the sandbox writes
 * outlives it except in the mounted work tree) with a tmpfs /tmp, no capabilities, no privilege
 * gain through setuid binaries, and a pids limit. The caller's own arguments win where they set
 * the same thing (client/apply-plan.ts), so `--pids-limit 100` or `--tmpfs /tmp:size=1g` replace
 * these rather than repeat them.
 */
export function hardenFlags(): string[] {
  return [
    '--read-only',
    '--tmpfs',
    '/tmp',
    '--cap-drop=ALL',
    '--security-opt',
    'no-new-privileges',
    '--pids-limit',
    String(HARDEN_PIDS_LIMIT),
  ];
}
