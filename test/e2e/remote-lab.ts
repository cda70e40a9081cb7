import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Cleanup, Sandbox } from '../helpers.js';
import { startRemotePodman } from '../lab/remote-podman.js';
import { removeTunnelRoots, startSshd, writeContainersConf } from '../lab/sshd.js';
import { podmanLab } from './lab.js';

/**
 * The shape of a Mac: podman reaches a Podman API service over ssh (connection `vm`), and that
 * service, the "VM", sees this host's files except `hidden`, which its own mount namespace covers
 * with empty tmpfs mounts. Returns the CONTAINERS_CONF that names the connection.
 */
export async function startRemoteVm(sandbox: Sandbox, hidden: readonly string[], cleanup: Cleanup): Promise<string> {
  return (await startVmConnection(sandbox, hidden, cleanup, false)).conf;
}

/** The same VM behind a connection podman calls a Podman machine's (`is_machine`), and its ssh port. */
export function startRemoteMachine(sandbox: Sandbox, hidden: readonly string[], cleanup: Cleanup): Promise<{ conf: string; port: number }> {
  return startVmConnection(sandbox, hidden, cleanup, true);
}

async function startVmConnection(sandbox: Sandbox, hidden: readonly string[], cleanup: Cleanup, isMachine: boolean): Promise<{ conf: string; port: number }> {
  const { env: podmanEnv } = podmanLab();
  cleanup.add(() => {
    removeTunnelRoots(sandbox.env.SANDBOXD_STATE_DIR);
  });
  // podman's own ssh client asks for a known_hosts file to add the VM's key to.
  mkdirSync(path.join(sandbox.home, '.ssh'), { recursive: true });
  writeFileSync(path.join(sandbox.home, '.ssh', 'known_hosts'), '', { flag: 'a' });
  const service = await startRemotePodman(podmanEnv, hidden, cleanup);
  const sshd = await startSshd(path.join(sandbox.dir, 'vm'), cleanup, { mountNamespaceOf: service.pid });
  const conf = writeContainersConf(path.join(sandbox.dir, 'containers.conf'), podmanEnv.CONTAINERS_CONF ?? '', [
    { name: 'vm', uri: `ssh://root@127.0.0.1:${String(sshd.port)}${service.socketPath}`, identity: sshd.clientKey, isMachine },
  ]);
  return { conf, port: sshd.port };
}
