import type { ContainerUser } from '../../shared/contracts/sessions.js';

/** `--userns=keep-id:uid=…,gid=…` came with podman 4.3.0. */
const KEEP_ID_WITH_IDS = [4, 3] as const;

/** What runs the session's containers, as far as whose files a container user may write goes. */
export type UserMappingEngine =
  /** Podman run by this (non-root) user on this host: container uids other than 0 are sub-uids. */
  | { kind: 'rootless-podman'; version: string | null }
  /** Docker Engine on this host: container uids are host uids as they are. */
  | { kind: 'rootful-docker' }
  /** Rootless Docker on this host: container root is the user, every other uid a sub-uid. */
  | { kind: 'rootless-docker' }
  /** A VM, a remote host, or an engine whose mapping sandboxd cannot tell: nothing is said. */
  | { kind: 'other' };

export interface UserMappingInput {
  engine: UserMappingEngine;
  /** The container user the session names (root when none). */
  user: Pick<ContainerUser, 'uid' | 'gid'>;
  /** The host user: the daemon's and the client's uid and gid. */
  host: { uid: number; gid: number };
  /** Whether the container gets a host directory to write (the work tree, a `:rw` mount). */
  writesHostFiles: boolean;
}

export interface UserMapping {
  flags: string[];
  warnings: string[];
  notices: string[];
}

const NONE: UserMapping = { flags: [], warnings: [], notices: [] };

/** `podman version 4.3.1` (or `podman-remote version …`, `4.9.4-rhel`) as [major, minor]. */
export function podmanVersionOf(output: string): [number, number] | null {
  const match = /version (\d+)\.(\d+)/.exec(output);
  return match === null ? null : [Number(match[1]), Number(match[2])];
}

function keepIdTakesIds(version: string | null): boolean {
  const parsed = version === null ? null : podmanVersionOf(version);
  if (parsed === null) return false;
  const [major, minor] = parsed;
  return major > KEEP_ID_WITH_IDS[0] || (major === KEEP_ID_WITH_IDS[0] && minor >= KEEP_ID_WITH_IDS[1]);
}

/**
 * Who owns the work tree in the container. Rootless Podman maps the user to container root and
 * every other container uid to a sub-uid, so `--user 1000` cannot write the user's files: the
 * plan maps the user onto the container user instead (`--userns=keep-id:uid=…,gid=…`; a caller's
 * own `--userns`, `--uidmap` or `--gidmap` wins, client/apply-plan.ts). Where no flag can do it,
 * a warning says what fails and the run argument that fixes it.
 */
export function userMapping(input: UserMappingInput): UserMapping {
  const { engine, user, host } = input;
  if (user.uid === 0 || user.uid === host.uid) {
    // Root is the user under rootless engines; the user's own uid is the user under rootful ones.
    return engine.kind === 'rootless-docker' && user.uid !== 0 && input.writesHostFiles ? rootlessDocker(user, host) : NONE;
  }
  switch (engine.kind) {
    case 'rootless-podman':
      return rootlessPodman(engine.version, user, host, input.writesHostFiles);
    case 'rootful-docker':
      return input.writesHostFiles
        ? {
            ...NONE,
            warnings: [
              `the container user (uid ${user.uid}) is not you (uid ${host.uid}), and Docker writes files as the container's uid, so it cannot write the work tree (Permission denied); run as yourself: \`--user ${host.uid}:${host.gid}\``,
            ],
          }
        : NONE;
    case 'rootless-docker':
      return input.writesHostFiles ? rootlessDocker(user, host) : NONE;
    case 'other':
      return NONE;
  }
}

function rootlessPodman(version: string | null, user: Pick<ContainerUser, 'uid' | 'gid'>, host: { uid: number }, writesHostFiles: boolean): UserMapping {
  if (keepIdTakesIds(version)) {
    // gid=0 is refused by some podman releases; without it the user's own group is kept.
    const ids = user.gid === 0 ? `uid=${user.uid}` : `uid=${user.uid},gid=${user.gid}`;
    const flag = `--userns=keep-id:${ids}`;
    return {
      flags: [flag],
      warnings: [],
      notices: [`podman: you (uid ${host.uid}) are uid ${user.uid} in the container (${flag}), so it writes the work tree as you`],
    };
  }
  if (!writesHostFiles) return NONE;
  const which = version === null ? 'this podman' : `podman ${version.replace(/^.*version\s+/, '')}`;
  return {
    ...NONE,
    warnings: [
      `container uid ${user.uid} is one of your sub-uids under rootless Podman, not you (uid ${host.uid}), and ${which} cannot map you onto it (keep-id:uid= needs podman 4.3), so it cannot write the work tree (Permission denied); run as yourself: \`--userns=keep-id --user ${host.uid}\``,
    ],
  };
}

function rootlessDocker(user: Pick<ContainerUser, 'uid'>, host: { uid: number }): UserMapping {
  return {
    ...NONE,
    warnings: [
      `container uid ${user.uid} is one of your sub-uids under rootless Docker, not you (uid ${host.uid}), so it cannot write the work tree (Permission denied); run as container root, which is you: \`--user 0\``,
    ],
  };
}

