/** sd_listen_fds(3): the first inherited socket is fd 3. */
export const SD_LISTEN_FDS_START = 3;
const ACTIVATION_VARIABLES = ['LISTEN_FDS', 'LISTEN_PID', 'LISTEN_FDNAMES'] as const;

/**
 * The listening socket systemd (or `systemd-socket-activate`) handed this process, or null. Only
 * when LISTEN_PID names this very process: the variables leak into children otherwise, and a child
 * must not mistake its parent's fds for its own.
 */
export function inheritedListenFd(env: Readonly<Record<string, string | undefined>>, pid: number): number | null {
  const fds = Number(env.LISTEN_FDS);
  if (env.LISTEN_PID !== String(pid) || !Number.isInteger(fds) || fds < 1) return null;
  return SD_LISTEN_FDS_START;
}

/** As sd_listen_fds(1) does: the daemon's children (ssh tunnels) must not see the variables. */
export function scrubActivationEnv(env: Record<string, string | undefined>): void {
  for (const name of ACTIVATION_VARIABLES) Reflect.deleteProperty(env, name);
}
