import type { EngineProfile } from './profile.js';
import { sharesHost } from './profile.js';

/**
 * Plain Docker Engine on this very host (rootful or rootless): same kernel, its files visible here.
 * A Docker Engine anywhere else that names no product is not guessed at: it is `unknown`.
 */
export const dockerEngine: EngineProfile = {
  kind: 'docker-engine',
  label: 'Docker Engine',
  stableId: true,
  matches: (info, host) => sharesHost(info, host),
  bridge: () => ({ kind: 'relay' }),
};
