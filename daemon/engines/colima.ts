import { BUILTIN_AGENT_SOCKET, type EngineProfile } from './profile.js';

/**
 * Colima's VM is named `colima` (or `colima-<profile>`). Only `colima start --ssh-agent` puts the
 * agent socket in it, which `docker info` does not tell: the probe does.
 */
export const colima: EngineProfile = {
  kind: 'colima',
  label: 'Colima',
  stableId: true,
  matches: (info) => /^colima(-.+)?$/.test(info.Name),
  bridge: () => ({
    kind: 'builtin',
    socket: BUILTIN_AGENT_SOCKET,
    missingRemedy: 'Restart Colima with the agent forwarded: `colima stop && colima start --ssh-agent`, or pass --ssh-agent off.',
  }),
};
