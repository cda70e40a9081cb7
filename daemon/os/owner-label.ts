import { stableHash } from './text.js';

/** The label naming which user and state dir a container or volume of sandboxd's belongs to. */
export const OWNER_LABEL = 'sandboxd.owner';

/**
 * One value per user and state dir: a sweep matches only its own containers, never those of
 * another user on a shared engine or of a second daemon with another SANDBOXD_STATE_DIR.
 */
export function ownerLabel(uid: number, stateDir: string): string {
  return stableHash(`${String(uid)}\0${stateDir}`, 16);
}
