import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Cleanup, Sandbox } from '../helpers.js';
import { startRemotePodman } from './remote-podman.js';
import { removeTunnelRoots, startSshd, writeContainersConf } from './sshd.js';

/**
 * Stands in for a Podman machine: a Podman API service (the "VM", where the containers run as
 * root) reached over the lab's sshd, which runs in the service's mount namespace so the tunnel's
 * socket is where the containers see it. Resolves to a containers.conf whose default connection,
 * `lab`, points there; the tunnel root it gets is removed by the cleanup.
 */
export async function startPodmanMachine(sandbox: Sandbox, podmanEnv: Record<string, string>, cleanup: Cleanup): Promise<string> {
  cleanup.add(() => {
    removeTunnelRoots(sandbox.env.SANDBOXD_STATE_DIR);
  });
  // podman's own ssh client asks for a known_hosts file to add the lab's host key to.
  mkdirSync(path.join(sandbox.home, '.ssh'), { recursive: true });
  writeFileSync(path.join(sandbox.home, '.ssh', 'known_hosts'), '');
  const service = await startRemotePodman(podmanEnv, [], cleanup);
  const sshd = await startSshd(path.join(sandbox.dir, 'vm'), cleanup, { mountNamespaceOf: service.pid });
  return writeContainersConf(
    path.join(sandbox.dir, 'containers.conf'),
    podmanEnv.CONTAINERS_CONF ?? '',
    [{ name: 'lab', uri: `ssh://root@127.0.0.1:${String(sshd.port)}${service.socketPath}`, identity: sshd.clientKey }],
    'lab',
  );
}
