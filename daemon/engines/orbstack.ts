import { BUILTIN_AGENT_SOCKET, type EngineProfile } from './profile.js';

/** OrbStack names itself as the operating system and serves Docker Desktop's agent socket. */
export const orbstack: EngineProfile = {
  kind: 'orbstack',
  label: 'OrbStack',
  stableId: true,
  matches: (info) => info.OperatingSystem === 'OrbStack' || info.Name === 'orbstack',
  bridge: () => ({
    kind: 'builtin',
    socket: BUILTIN_AGENT_SOCKET,
    missingRemedy: 'Update OrbStack (it serves the agent at /run/host-services/ssh-auth.sock), or pass --ssh-agent off.',
  }),
};
