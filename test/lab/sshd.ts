import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { execa } from 'execa';
import { cliEnv, startAgent, waitFor, type Agent, type Cleanup, type Sandbox } from '../helpers.js';

export interface Sshd {
  port: number;
  clientKey: string;
  configPath: string;
  /** Starts (again) the listener. */
  start(): Promise<void>;
  /** Stops the listener and every connection it serves, as a machine that goes down would. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The listener and its per-connection children (whose command lines do not name the config). */
function pidsOf(configPath: string): number[] {
  const out = spawnSync('pgrep', ['-f', configPath], { encoding: 'utf8' }).stdout;
  const pids = out.split('\n').filter((line) => line !== '').map(Number);
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone
    }
  }
  for (let i = 0; i < pids.length; i += 1) pids.push(...(parents.get(pids[i] ?? -1) ?? []));
  return pids;
}

/**
 * A real OpenSSH server on a loopback port, standing in for the Podman machine's VM: the tunnel's
 * VM-side socket is then a local path, which local containers can mount. With `mountNamespaceOf`
 * it runs in that process's mount namespace (a remote podman's, test/lab/remote-podman.ts).
 */
export async function startSshd(dir: string, cleanup: Cleanup, options: { mountNamespaceOf?: number } = {}): Promise<Sshd> {
  mkdirSync('/run/sshd', { recursive: true });
  mkdirSync(dir, { recursive: true });
  const hostKey = path.join(dir, 'host_key');
  const clientKey = path.join(dir, 'client_key');
  await execa('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', hostKey]);
  await execa('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'sandboxd-lab-client', '-f', clientKey]);
  const authorized = path.join(dir, 'authorized_keys');
  copyFileSync(`${clientKey}.pub`, authorized);
  chmodSync(authorized, 0o600);
  const configPath = path.join(dir, 'sshd_config');
  const pidFile = path.join(dir, 'sshd.pid');
  const configure = (port: number): void => {
    writeFileSync(
      configPath,
      [
        `Port ${String(port)}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKey}`,
        `AuthorizedKeysFile ${authorized}`,
        `PidFile ${pidFile}`,
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'PermitRootLogin yes',
        'AllowStreamLocalForwarding yes',
        'ClientAliveInterval 5',
        // bash reads root's ~/.bashrc for an sshd command only below SHLVL 2: this machine's runs
        // `pyenv rehash`, whose lock a killed login (the chaos here) leaves, and then every login waits 60 s.
        'SetEnv SHLVL=1',
        '',
      ].join('\n'),
    );
  };
  /**
   * Starts sshd and resolves once it wrote its pid file, which it does after it bound its port: a
   * connect alone could reach another listener that took the port since freePort() let it go.
   * Resolves to false when sshd exited instead (the port was taken meanwhile).
   */
  const launch = async (): Promise<boolean> => {
    rmSync(pidFile, { force: true });
    const argv = ['/usr/sbin/sshd', '-D', '-f', configPath, '-E', path.join(dir, 'sshd.log')];
    // In the mount namespace of a remote podman's "VM", so what ssh sees is what its containers see.
    const [file, ...args] = options.mountNamespaceOf === undefined ? argv : ['nsenter', `--mount=/proc/${String(options.mountNamespaceOf)}/ns/mnt`, ...argv];
    const child = spawn(file ?? '/usr/sbin/sshd', args, { stdio: 'ignore' });
    child.unref();
    const outcome = await waitFor(() => {
      if (child.exitCode !== null || child.signalCode !== null) return 'exited';
      try {
        return Number(readFileSync(pidFile, 'utf8').trim()) === child.pid ? 'listening' : null;
      } catch {
        return null;
      }
    }, 'sshd to listen');
    return outcome === 'listening';
  };
  const stop = async (): Promise<void> => {
    for (const pid of pidsOf(configPath)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await waitFor(() => pidsOf(configPath).length === 0, 'sshd to stop');
  };
  cleanup.add(stop);
  const log = (): string => readFileSync(path.join(dir, 'sshd.log'), 'utf8');
  let port = 0;
  for (let attempt = 1; ; attempt += 1) {
    port = await freePort();
    configure(port);
    if (await launch()) break;
    if (attempt === 3) throw new Error(`sshd did not start on a free port 3 times: ${log()}`);
  }
  return {
    port,
    clientKey,
    configPath,
    async start() {
      if (!(await launch())) throw new Error(`sshd did not start again on port ${String(port)}: ${log()}`);
    },
    stop,
  };
}

/** A containers.conf of the test's own: the lab's engine settings plus the given connections. */
export function writeContainersConf(
  file: string,
  base: string,
  connections: { name: string; uri: string; identity?: string; isMachine?: boolean }[],
  active?: string,
): string {
  const lines = [readFileSync(base, 'utf8').trimEnd()];
  if (active !== undefined) lines.push(`active_service = "${active}"`);
  for (const connection of connections) {
    lines.push(`[engine.service_destinations.${connection.name}]`, `uri = "${connection.uri}"`);
    if (connection.identity !== undefined) lines.push(`identity = "${connection.identity}"`);
    if (connection.isMachine === true) lines.push('is_machine = true');
  }
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

/**
 * A client of a Podman machine tunnel: the sandbox's podman lists one connection, `lab` (active), to
 * this sshd as root at `host`; the user has a known_hosts file (podman's own ssh client adds the
 * lab's host key to it); a real agent holds the test key; the bridge is the tunnel.
 */
export async function labConnection(
  sandbox: Sandbox,
  podmanEnv: Record<string, string>,
  sshd: Sshd,
  cleanup: Cleanup,
  options: { host?: string; socketPath?: string } = {},
): Promise<{ env: NodeJS.ProcessEnv; agent: Agent }> {
  mkdirSync(path.join(sandbox.home, '.ssh'), { recursive: true });
  writeFileSync(path.join(sandbox.home, '.ssh', 'known_hosts'), '');
  const uri = `ssh://root@${options.host ?? '127.0.0.1'}:${String(sshd.port)}${options.socketPath ?? '/run/podman/podman.sock'}`;
  const conf = writeContainersConf(path.join(sandbox.dir, 'containers.conf'), podmanEnv.CONTAINERS_CONF ?? '', [{ name: 'lab', uri, identity: sshd.clientKey }], 'lab');
  const agent = await startAgent(sandbox.dir, cleanup);
  return { env: cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, SSH_AUTH_SOCK: agent.socket, SANDBOXD_SSH_BRIDGE: 'tunnel' }), agent };
}

/** The VM tunnel roots a daemon with this state dir chose and kept (`tunnel-roots.json`). */
export function tunnelRootsOf(stateDir: string): string[] {
  try {
    const kept = JSON.parse(readFileSync(path.join(stateDir, 'tunnel-roots.json'), 'utf8')) as { roots: Record<string, string> };
    return Object.values(kept.roots).map((name) => `/tmp/sandboxd-${name}`);
  } catch {
    return [];
  }
}

/** Removes every tunnel root a daemon with this state dir kept in the lab's "VM" (this host). */
export function removeTunnelRoots(stateDir: string): void {
  for (const root of tunnelRootsOf(stateDir)) removeTunnelRoot(root);
}

/**
 * Removes a tunnel root the lab's "VM" (this host) got, and the sockets sshd bound beside it that
 * no script moved in (a generation killed before it published its socket).
 */
export function removeTunnelRoot(root: string): void {
  rmSync(root, { recursive: true, force: true });
  const prefix = `${path.basename(root)}.`;
  for (const name of readdirSync(path.dirname(root))) {
    if (name.startsWith(prefix) && name.endsWith('.sock')) rmSync(path.join(path.dirname(root), name), { force: true });
  }
}
