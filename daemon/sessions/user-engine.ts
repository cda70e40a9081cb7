import type { AcquireInput, SshBridgeSetting } from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';
import type { IdentifiedEngine } from '../engines/engine-identifier.js';
import { chooseSite } from '../podman/engine-site.js';
import { chooseBridge } from '../plan/bridge-select.js';
import { socketBridge } from '../plan/host-sockets.js';
import type { UserMappingEngine } from '../plan/user-namespace.js';

export interface UserEngineDeps {
  platform: Platform;
  /** The daemon's uid, which is the client's: the socket is the user's own. */
  uid: number;
  /** `podman --version` of the podman on a PATH (cached per binary). */
  podmanVersion(searchPath: string): Promise<string | null>;
  /**
   * The session's Docker engine (cached per docker view). Its failure fails the acquire (but for a
   * docker missing from PATH): an engine that does not answer runs no container, so no plan is
   * handed out for one (and no warning that it did not carry the agent, before docker's own error).
   */
  identifyDocker(input: AcquireInput): Promise<IdentifiedEngine>;
}

/**
 * How the session's engine maps container uids to host users, as far as this host can tell: a
 * local rootless Podman, a Docker Engine on this host (rootful or rootless), or anything else (a
 * VM, a remote host, a Podman service behind CONTAINER_HOST), about which nothing is said.
 */
export async function userEngine(input: AcquireInput, deps: UserEngineDeps): Promise<UserMappingEngine> {
  if (input.engine === 'docker') {
    // docker info is asked only where its answer is needed anyway: a container user other than
    // root (whose files?), or an agent or credential socket carried by the engine (identified by
    // the bridge too, from the same cache). Elsewhere docker's own run reports an engine that does
    // not answer.
    const carried = (setting: SshBridgeSetting): boolean =>
      chooseBridge({ setting, engine: 'docker', platform: deps.platform, env: input.client.env ?? {}, connectionRequested: input.connection !== undefined }).kind === 'engine';
    const bridged = (input.sshAgent !== 'off' && carried(input.sshBridge)) || (input.gitCredentials.length > 0 && carried(socketBridge(input.sshBridge)));
    if (!bridged && (input.containerUser?.uid ?? 0) === 0) return { kind: 'other' };
    const identified = await deps.identifyDocker(input).catch((error: unknown) => {
      // No docker on the session's PATH: its own `run` says so (127), as it would without sandboxd.
      if (error instanceof SandboxdError && error.code === 'ENGINE_NOT_FOUND') return null;
      throw error;
    });
    if (identified === null) return { kind: 'other' };
    const { identity } = identified;
    if (identity.kind !== 'docker-engine') return { kind: 'other' };
    return { kind: identity.rootless ? 'rootless-docker' : 'rootful-docker' };
  }
  const env = input.client.env ?? {};
  const site = chooseSite({ engine: input.engine, platform: deps.platform, env, connectionRequested: input.connection !== undefined, sshBridge: input.sshBridge });
  if (site.kind !== 'local' || deps.platform !== 'linux' || deps.uid === 0 || (env.CONTAINER_HOST ?? '') !== '') return { kind: 'other' };
  return { kind: 'rootless-podman', version: await deps.podmanVersion(input.client.path ?? '') };
}
