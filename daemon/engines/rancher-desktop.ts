import { BUILTIN_AGENT_SOCKET, type EngineProfile } from './profile.js';

/**
 * Rancher Desktop's VM is `lima-rancher-desktop` (its WSL distribution says so as the OS). It
 * forwards no agent of its own; the probe still looks, for a VM set up by hand.
 */
export const rancherDesktop: EngineProfile = {
  kind: 'rancher-desktop',
  label: 'Rancher Desktop',
  stableId: true,
  matches: (info) => info.Name === 'lima-rancher-desktop' || info.OperatingSystem.startsWith('Rancher Desktop'),
  bridge: () => ({
    kind: 'builtin',
    socket: BUILTIN_AGENT_SOCKET,
    missingRemedy: 'Rancher Desktop forwards no SSH agent into its VM: use Docker Desktop, OrbStack, `colima start --ssh-agent` or a Podman machine, or pass --ssh-agent off.',
  }),
};
