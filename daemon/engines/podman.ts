import type { EngineProfile } from './profile.js';
import { sharesHost } from './profile.js';

/**
 * Podman's Docker-compatible API: its storage is containers/storage and it logs with `k8s-file`;
 * its `docker info` ID is made up anew on every call, so it identifies nothing.
 */
export const podman: EngineProfile = {
  kind: 'podman',
  label: 'Podman',
  stableId: false,
  matches: (info) => info.DockerRootDir.includes('/containers/storage') || (info.Plugins?.Log ?? []).includes('k8s-file'),
  // A local Podman service shares this host; otherwise the docker CLI drives a Podman machine.
  bridge: (info, host) => (sharesHost(info, host) ? { kind: 'relay' } : { kind: 'podman-tunnel' }),
};
