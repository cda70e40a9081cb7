import { labelsOf } from './docker-info.js';
import { BUILTIN_AGENT_SOCKET, type EngineProfile } from './profile.js';

/** Docker Desktop on macOS, Windows and Linux: its VM says so, and labels itself with its address. */
export const dockerDesktop: EngineProfile = {
  kind: 'docker-desktop',
  label: 'Docker Desktop',
  stableId: true,
  matches: (info) => info.OperatingSystem === 'Docker Desktop' || labelsOf(info).has('com.docker.desktop.address'),
  bridge: () => ({
    kind: 'builtin',
    socket: BUILTIN_AGENT_SOCKET,
    missingRemedy: 'Update Docker Desktop (it serves the agent at /run/host-services/ssh-auth.sock since 2.2), or pass --ssh-agent off.',
  }),
};
