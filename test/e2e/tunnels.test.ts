import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, lutimesSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession, listTunnels } from '../../dist/client/index.js';
import { Cleanup, cli, daemonPid, makeSandbox, pidAlive, waitFor, type Sandbox } from '../helpers.js';
import { startRemotePodman, startVmTmp, vmFilesDir } from '../lab/remote-podman.js';
import { labConnection, removeTunnelRoot, removeTunnelRoots, startSshd, tunnelRootsOf, writeContainersConf, type Sshd } from '../lab/sshd.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Lab {
  sandbox: Sandbox;
  sshd: Sshd;
  env: NodeJS.ProcessEnv;
  agent: { socket: string; fingerprint: string };
  image: string;
}

/**
 * A sandbox whose podman lists one connection, `lab`, pointing at a real sshd on loopback; with
 * `service`, a podman API service behind it runs the containers that go through the connection;
 * with `vmTmpOf`, the sshd runs in that process's mount namespace (a VM with its own /tmp).
 */
async function tunnelLab(service = false, vmTmpOf?: number): Promise<Lab> {
  const { env: podmanEnv, image } = podmanLab();
  const sandbox = makeSandbox(cleanup);
  // The "VM" is this machine: its per-user tunnel root lives in /tmp and is removed after the test.
  cleanup.add(() => {
    removeTunnelRoots(sandbox.env.SANDBOXD_STATE_DIR);
  });
  // A VM with its own /tmp cannot see the sandbox (which is in this host's /tmp): its sshd's files go to /run.
  const sshdDir = vmTmpOf === undefined ? path.join(sandbox.dir, 'vm') : vmFilesDir(cleanup);
  const sshd = await startSshd(sshdDir, cleanup, vmTmpOf === undefined ? {} : { mountNamespaceOf: vmTmpOf });
  const socketPath = service ? (await startRemotePodman(podmanEnv, [], cleanup)).socketPath : undefined;
  const { env, agent } = await labConnection(sandbox, podmanEnv, sshd, cleanup, { socketPath });
  return { sandbox, sshd, env, agent, image };
}

/** The tunnel's ssh names no VM path (its script is on stdin, its forwards go over its control socket in the runtime dir, quoted as ssh reads an option's path). */
function sshPidsFor(env: NodeJS.ProcessEnv): number[] {
  const out = spawnSync('pgrep', ['-f', `^ssh .*ControlPath="${env.SANDBOXD_RUNTIME_DIR ?? ''}/t/`], { encoding: 'utf8' }).stdout;
  return out.split('\n').filter((line) => line !== '').map(Number);
}

/** The VM directory a session's plan mounts for the agent: its own, in the tunnel's dir, under the root. */
function agentDirOf(session: { plan: { mounts: { purpose: string; source: string }[] } }): string {
  return session.plan.mounts.find((m) => m.purpose === 'ssh agent')?.source ?? '';
}

/** The tunnel root in the VM above a session's directory. */
function rootOf(session: { plan: { mounts: { purpose: string; source: string }[] } }): string {
  return path.dirname(path.dirname(agentDirOf(session)));
}

async function agentLists(socket: string): Promise<string> {
  return (await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: socket }, reject: false, timeout: 5_000 })).stdout;
}

describe.skipIf(labMissing)('Podman machine tunnels (real sshd, ssh-agent, podman)', () => {
  it('forwards the agent: the session\'s own VM socket answers ssh-add -l, 0666 in its own 0711 dir, in a 0711 tunnel dir under a 0700 root', async () => {
    const { env, agent } = await tunnelLab();
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => session.release());
    expect(session.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'tunnel', socket: '/run/sandboxd/ssh/agent.sock', hostAgentSocket: agent.socket });
    const mount = session.plan.mounts.find((m) => m.purpose === 'ssh agent');
    expect(mount?.source).toMatch(/^\/tmp\/sandboxd-[0-9a-f]{16}\/[0-9a-f]{32}\/[0-9a-f]{16}$/);
    expect(mount).not.toHaveProperty('relabel');
    const vmDir = mount?.source ?? '';
    expect(statSync(rootOf(session)).mode & 0o777).toBe(0o700);
    expect(statSync(path.dirname(vmDir)).mode & 0o777).toBe(0o711);
    expect(statSync(vmDir).mode & 0o777).toBe(0o711);
    expect(statSync(path.join(vmDir, 'agent.sock')).mode & 0o777).toBe(0o666);
    expect(await agentLists(path.join(vmDir, 'agent.sock'))).toContain(agent.fingerprint);
    const other = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => other.release());
    expect(path.dirname(agentDirOf(other))).toBe(path.dirname(vmDir));
    expect(agentDirOf(other)).not.toBe(vmDir);
    const [tunnel] = await listTunnels(env);
    expect(tunnel).toMatchObject({ kind: 'tunnel', connection: 'lab', state: 'ready', refs: 2, endpoints: 2, restarts: 0, socketPath: `${path.dirname(vmDir)}/*/agent.sock` });
    // Released, its socket no longer answers and its directory goes.
    await session.release();
    await waitFor(() => !existsSync(vmDir), 'the released session\'s directory to go', 10_000, 100);
    expect(await agentLists(path.join(agentDirOf(other), 'agent.sock'))).toContain(agent.fingerprint);
  });

  it.each([
    ['root', []],
    ['--user 1000', ['--user', '1000:1000']],
  ])('a container from `sandboxd run --ssh-bridge tunnel` runs through the connection and lists the key as %s', async (_name, userArgs) => {
    const { env, agent, image } = await tunnelLab(true);
    const plan = JSON.parse((await cli(['plan', '--engine', 'podman', '--ssh-bridge', 'tunnel', '--json'], env)).stdout) as { plan: { globalArgs: string[]; warnings: string[] } };
    expect(plan.plan.globalArgs).toEqual(['--connection', 'lab']);
    expect(plan.plan.warnings).toContain("--ssh-bridge tunnel with a local podman: the container runs through connection lab (podman --connection lab), where the tunnel's agent socket is");
    const result = await cli(['run', '--quiet', '--engine', 'podman', '--ssh-bridge', 'tunnel', '--', '--rm', '--network', 'none', ...userArgs, image, 'ssh-add', '-l'], env, 60_000);
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.exitCode).toBe(0);
  });

  it('with a state dir holding a blank (the Mac\'s) and a machine off loopback, the host key goes to the state dir\'s known_hosts, never to a stray file', async () => {
    const { env: podmanEnv } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    // ~/Library/Application Support/sandboxd in shape, for state and runtime alike as on a Mac (the
    // tunnel's ControlPath is in the runtime dir); set on the sandbox so its cleanup stops this daemon.
    const stateDir = path.join(sandbox.dir, 'Application Support', 'sandboxd');
    sandbox.env.SANDBOXD_STATE_DIR = stateDir;
    sandbox.env.SANDBOXD_RUNTIME_DIR = stateDir;
    cleanup.add(() => {
      removeTunnelRoots(stateDir);
    });
    const sshd = await startSshd(path.join(sandbox.dir, 'vm'), cleanup);
    // An IPv4-mapped address: this machine's loopback sshd to the kernel, but not loopback to the
    // daemon (`isLoopback`) nor to ssh (`sockaddr_is_local` takes only ::1 for IPv6), so host keys are checked.
    const { env, agent } = await labConnection(sandbox, podmanEnv, sshd, cleanup, { host: '[::ffff:127.0.0.1]' });
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => session.release());
    expect(session.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'tunnel' });
    expect(await agentLists(path.join(agentDirOf(session), 'agent.sock'))).toContain(agent.fingerprint);
    const hostKey = readFileSync(path.join(sandbox.dir, 'vm', 'host_key.pub'), 'utf8').split(' ').slice(0, 2).join(' ');
    const knownHosts = path.join(stateDir, 'known_hosts');
    expect(readFileSync(knownHosts, 'utf8').trim().split('\n')).toHaveLength(1);
    // Hashed or not (Debian's ssh_config hashes), ssh finds it under the address the connection names.
    const found = await execa('ssh-keygen', ['-F', `[::ffff:127.0.0.1]:${String(sshd.port)}`, '-f', knownHosts], { reject: false });
    expect(found.stdout).toContain(hostKey);
    // Split on the blank, ssh wrote to `…/Application` (and read `Support/sandboxd/known_hosts` in the daemon's cwd, /).
    expect(existsSync(path.join(sandbox.dir, 'Application'))).toBe(false);
    expect(existsSync('/Support')).toBe(false);
    // ~/.ssh/known_hosts is not checked: podman's own ssh client (the daemon's `podman --connection
    // lab ps …` sweep) adds an unknown host's key there on first use, as it does for the user.
  });

  it('no process, host or VM, names a VM path on its argv while sessions come and go: the script is on stdin, the forwards go over the control socket', async () => {
    const { env, sandbox } = await tunnelLab();
    // The lab's "VM" is this host: every process of both is in /proc. Sampled as fast as it reads.
    const seen = new Set<string>();
    const state = { sampling: true };
    const sampler = (async () => {
      while (state.sampling) {
        for (const entry of readdirSync('/proc')) {
          if (!/^\d+$/.test(entry)) continue;
          try {
            const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
            // Tunnel roots are /tmp/sandboxd-<16 hex>; everything in the VM sandboxd names is below one.
            if (/\/tmp\/sandboxd-[0-9a-f]{16}/.test(argv)) seen.add(argv);
          } catch {
            // gone meanwhile
          }
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    const dirs: string[] = [];
    try {
      for (let run = 0; run < 10; run += 1) {
        const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
        dirs.push(agentDirOf(session));
        await session.release();
      }
      await cli(['stop'], env);
    } finally {
      state.sampling = false;
      await sampler;
    }
    expect(new Set(dirs).size).toBe(10);
    // Other users of this machine run their own tunnels: only this daemon's root counts.
    const [root] = tunnelRootsOf(sandbox.env.SANDBOXD_STATE_DIR);
    expect(root).toMatch(/^\/tmp\/sandboxd-[0-9a-f]{16}$/);
    expect([...seen].filter((argv) => argv.includes(root ?? ''))).toEqual([]);
  });

  it('20 concurrent sessions on one machine and agent share exactly one ssh process', async () => {
    const { env, sandbox } = await tunnelLab();
    await cli(['start'], env);
    const sessions = await Promise.all(Array.from({ length: 20 }, () => acquireSession({ engine: 'podman', env, heartbeat: false })));
    cleanup.add(() => Promise.all(sessions.map((s) => s.release())));
    const bridgeIds = new Set(sessions.map((s) => (s.info.ssh.status === 'forwarded' ? s.info.ssh.bridgeId : '')));
    expect(bridgeIds.size).toBe(1);
    const tunnels = await listTunnels(env);
    expect(tunnels).toHaveLength(1);
    expect(tunnels[0]).toMatchObject({ refs: 20, endpoints: 20 });
    // Each its own socket, in its own directory.
    expect(new Set(sessions.map((s) => agentDirOf(s))).size).toBe(20);
    expect(sshPidsFor(env)).toEqual([tunnels[0]?.pid]);
    expect(daemonPid(sandbox.env)).not.toBeNull();
  });

  it('heals a killed ssh (its sshd leaves the session\'s socket file, which is bound again); a container started before the kill still reaches the agent after it', async () => {
    const { env, agent, image } = await tunnelLab(true);
    const holder = await acquireSession({ engine: 'podman', env });
    cleanup.add(() => holder.release());
    const [before] = await listTunnels(env);
    const container = cli(
      ['run', '--quiet', '--engine', 'podman', '--', '--rm', '--network', 'none', '--user', '1000', image, 'sh', '-c', 'ssh-add -l >/dev/null && echo before-ok; sleep 8; ssh-add -l'],
      env,
      60_000,
    );
    let out = '';
    container.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('before-ok'), 'the container to reach the agent once', 30_000);
    process.kill(before?.pid ?? 0, 'SIGKILL');

    const healed = await waitFor(async () => {
      const [tunnel] = await listTunnels(env);
      return tunnel?.state === 'ready' && tunnel.pid !== before?.pid ? tunnel : null;
    }, 'the tunnel to heal');
    expect(healed.restarts).toBeGreaterThanOrEqual(1);
    expect(healed.lastError).toBeNull();
    const result = await container;
    expect(result.stdout).toContain('before-ok');
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.exitCode).toBe(0);
  });

  it('an unreachable machine fails acquire within 20 s with TUNNEL_UNREACHABLE, and the tunnel recovers by itself', async () => {
    const { env, sshd, agent } = await tunnelLab();
    const holder = await acquireSession({ engine: 'podman', env });
    cleanup.add(() => holder.release());
    const vmSocket = path.join(holder.plan.mounts.find((m) => m.purpose === 'ssh agent')?.source ?? '', 'agent.sock');

    await sshd.stop();
    await waitFor(async () => (await listTunnels(env))[0]?.state === 'restarting', 'the tunnel to notice', 20_000, 200);
    const started = Date.now();
    const failed = await cli(['plan', '--engine', 'podman', '--json'], env, 40_000);
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(failed.exitCode).toBe(1);
    const error = (JSON.parse(failed.stdout) as { error: { code: string; message: string; remedy: string } }).error;
    expect(error.code).toBe('TUNNEL_UNREACHABLE');
    expect(error.message).toContain('connection lab');
    expect(error.message).toContain('Connection refused');
    expect(error.remedy).toContain('podman machine start');
    expect((await listTunnels(env))[0]?.lastError).toContain('Connection refused');

    await sshd.start();
    await waitFor(async () => (await listTunnels(env))[0]?.state === 'ready', 'the tunnel to recover', 20_000, 200);
    expect(await agentLists(vmSocket)).toContain(agent.fingerprint);
    const again = await cli(['plan', '--engine', 'podman', '--json'], env);
    expect(again.exitCode).toBe(0);
  });

  it('an unreachable machine on a cold start fails with TUNNEL_UNREACHABLE and ssh\'s own line', async () => {
    const { env, sshd } = await tunnelLab();
    await sshd.stop();
    const result = await cli(['plan', '--engine', 'podman', '--json'], env, 40_000);
    expect(JSON.parse(result.stdout)).toMatchObject({
      error: { code: 'TUNNEL_UNREACHABLE', message: expect.stringMatching(/connection lab is unreachable: .*Connection refused/) as string },
    });
    expect(await listTunnels(env)).toEqual([]);
  });

  it('reports ssh\'s own stderr when the identity is refused', async () => {
    const { env, sandbox, sshd } = await tunnelLab();
    const { env: podmanEnv } = podmanLab();
    const wrongKey = path.join(sandbox.dir, 'wrong_key');
    await execa('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', wrongKey]);
    const conf = writeContainersConf(path.join(sandbox.dir, 'bad.conf'), podmanEnv.CONTAINERS_CONF ?? '', [
      { name: 'lab', uri: `ssh://root@127.0.0.1:${sshd.port}/run/podman/podman.sock`, identity: wrongKey },
    ], 'lab');
    const result = await cli(['plan', '--engine', 'podman', '--json'], { ...env, CONTAINERS_CONF: conf });
    expect(JSON.parse(result.stdout)).toMatchObject({
      error: { code: 'TUNNEL_AUTH_FAILED', message: expect.stringContaining('Permission denied (publickey)') as string },
    });
  });

  it('kill -9 of the daemon leaves no orphaned ssh, and acquire works after', async () => {
    const { env, sandbox, agent } = await tunnelLab();
    await acquireSession({ engine: 'podman', env, heartbeat: false });
    const daemon = daemonPid(sandbox.env) ?? 0;
    process.kill(daemon, 'SIGKILL');
    await waitFor(() => !pidAlive(daemon), 'the daemon to die');
    await waitFor(() => sshPidsFor(env).length === 0, 'no orphaned ssh', 10_000);

    const next = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => next.release());
    expect(await agentLists(path.join(agentDirOf(next), 'agent.sock'))).toContain(agent.fingerprint);
    expect(sshPidsFor(env)).toHaveLength(1);
  });

  it('halts an idle tunnel after the grace period and removes its VM socket', async () => {
    const { env } = await tunnelLab();
    const idleEnv = { ...env, SANDBOXD_TUNNEL_IDLE: '1' };
    const session = await acquireSession({ engine: 'podman', env: idleEnv, heartbeat: false });
    const vmDir = path.dirname(agentDirOf(session));
    expect(existsSync(vmDir)).toBe(true);
    await session.release();
    expect((await listTunnels(idleEnv))[0]?.state).toBe('draining');
    await waitFor(async () => (await listTunnels(idleEnv)).length === 0, 'the idle tunnel to stop', 10_000, 200);
    await waitFor(() => !existsSync(vmDir), 'the VM dir to be removed', 5_000);
    expect(sshPidsFor(env)).toEqual([]);
  });

  it("a machine's `<name>-root` (root) and `<name>` (another user) connections on one port each get a VM root they own", async () => {
    const { env, sandbox, sshd, agent } = await tunnelLab();
    const user = `sbx${randomBytes(3).toString('hex')}`;
    await execa('useradd', ['--create-home', '--shell', '/bin/sh', '--password', '*', user]);
    cleanup.add(() => execa('userdel', ['--remove', '--force', user], { reject: false }));
    const uid = Number((await execa('id', ['-u', user])).stdout);
    // sshd reads authorized_keys as the user logging in.
    for (const dir of [sandbox.dir, path.join(sandbox.dir, 'vm')]) chmodSync(dir, 0o711);
    chmodSync(path.join(sandbox.dir, 'vm', 'authorized_keys'), 0o644);
    const conf = writeContainersConf(path.join(sandbox.dir, 'two.conf'), podmanLab().env.CONTAINERS_CONF ?? '', [
      { name: 'lab', uri: `ssh://${user}@127.0.0.1:${sshd.port}/run/user/${uid}/podman/podman.sock`, identity: sshd.clientKey },
      { name: 'lab-root', uri: `ssh://root@127.0.0.1:${sshd.port}/run/podman/podman.sock`, identity: sshd.clientKey },
    ], 'lab');
    const twoEnv = { ...env, CONTAINERS_CONF: conf };
    // Root first: a root-owned directory shared with the other user is what used to fail. Outside a
    // repository: this VM's own /tmp hides the state dir that a repository's sandbox git dir lives in.
    const asRoot = await acquireSession({ engine: 'podman', env: twoEnv, connection: 'lab-root', heartbeat: false, cwd: '/' });
    cleanup.add(() => asRoot.release());
    const asUser = await acquireSession({ engine: 'podman', env: twoEnv, connection: 'lab', heartbeat: false, cwd: '/' });
    cleanup.add(() => asUser.release());
    expect(rootOf(asUser)).not.toBe(rootOf(asRoot));
    expect(statSync(rootOf(asUser)).uid).toBe(uid);
    expect(statSync(rootOf(asRoot)).uid).toBe(0);
    for (const session of [asRoot, asUser]) expect(await agentLists(path.join(agentDirOf(session), 'agent.sock'))).toContain(agent.fingerprint);
  });

  it('`tunnels restart ID` makes a new generation that forwards the session\'s socket again; `sandboxd stop` ends the tunnel and keeps the directory', async () => {
    const { env, agent } = await tunnelLab();
    const session = await acquireSession({ engine: 'podman', env });
    cleanup.add(() => session.release());
    const [before] = await listTunnels(env);
    const restarted = await cli(['tunnels', 'restart', before?.id ?? '', '--json'], env);
    const after = JSON.parse(restarted.stdout) as { pid: number; restarts: number; state: string };
    expect(after).toMatchObject({ state: 'ready', restarts: 1 });
    expect(after.pid).not.toBe(before?.pid);
    const socket = path.join(agentDirOf(session), 'agent.sock');
    expect(await agentLists(socket)).toContain(agent.fingerprint);

    expect((await cli(['stop'], env)).exitCode).toBe(0);
    expect(sshPidsFor(env)).toEqual([]);
    // The directory a container mounts stays, for the next daemon; nothing answers there meanwhile.
    expect(existsSync(agentDirOf(session))).toBe(true);
    expect(await agentLists(socket)).toBe('');
  });

  /**
   * The lab with a second user of the "VM" and a root the daemon chose, kept and then lost: the
   * session released, the daemon stopped and the root removed, as a reboot of the VM leaves it.
   */
  async function lostRoot() {
    const lab = await tunnelLab();
    const user = `sbx${randomBytes(3).toString('hex')}`;
    await execa('useradd', ['--no-create-home', '--shell', '/bin/sh', '--password', '*', user]);
    cleanup.add(() => execa('userdel', ['--force', user], { reject: false }));
    const uid = Number((await execa('id', ['-u', user])).stdout);
    const session = await acquireSession({ engine: 'podman', env: lab.env, heartbeat: false });
    const root = rootOf(session);
    await session.release();
    expect((await cli(['stop'], lab.env)).exitCode).toBe(0);
    removeTunnelRoot(root);
    // Whatever the other user leaves there is theirs to keep; the test removes it at the end.
    cleanup.add(() => {
      rmSync(root, { recursive: true, force: true });
    });
    const asOther = (argv: string[]) => execa('setpriv', [`--reuid=${String(uid)}`, `--regid=${String(uid)}`, '--clear-groups', ...argv]);
    return { ...lab, uid, root, asOther };
  }

  it('a root another VM user created first is left alone: the next tunnel is ready under a new name, kept, and the log says so', async () => {
    const { env, sandbox, agent, uid, root, asOther } = await lostRoot();
    await asOther(['mkdir', '-m', '755', root]);
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => session.release());
    const moved = rootOf(session);
    expect(moved).toMatch(/^\/tmp\/sandboxd-[0-9a-f]{16}$/);
    expect(moved).not.toBe(root);
    expect(tunnelRootsOf(sandbox.env.SANDBOXD_STATE_DIR)).toEqual([moved]);
    expect(statSync(root)).toMatchObject({ uid, mode: 0o40755 });
    expect(readdirSync(root)).toEqual([]);
    expect(await agentLists(path.join(agentDirOf(session), 'agent.sock'))).toContain(agent.fingerprint);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).toContain(JSON.stringify({ taken: root, root: moved, msg: 'the tunnel root in the VM belongs to someone else; left it alone and chose a new one' }).slice(1, -1));
  });

  it('a symlink another VM user planted at the root is never followed: its target keeps its mode and gets no tunnel dir', async () => {
    const { env, sandbox, agent, root, asOther } = await lostRoot();
    // To a directory the remote user (root) owns; with fs.protected_symlinks=0, as on this
    // machine, root would follow it.
    const victim = path.join(sandbox.dir, 'victim');
    mkdirSync(victim, { mode: 0o755 });
    await asOther(['ln', '-s', victim, root]);
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => session.release());
    expect(rootOf(session)).not.toBe(root);
    expect(lstatSync(root).isSymbolicLink()).toBe(true);
    expect(statSync(victim).mode & 0o777).toBe(0o755);
    expect(readdirSync(victim)).toEqual([]);
    expect(await agentLists(path.join(agentDirOf(session), 'agent.sock'))).toContain(agent.fingerprint);
  });

  it("a running tunnel's directory survives the VM's systemd-tmpfiles ageing out its /tmp (Fedora's 10-day rule)", async () => {
    const vm = await startVmTmp(cleanup);
    const { env, agent } = await tunnelLab(false, vm.pid);
    // Outside a repository: this VM's own /tmp hides the state dir a sandbox git dir lives in.
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false, cwd: '/' });
    cleanup.add(() => session.release());
    const vmDir = session.plan.mounts.find((m) => m.purpose === 'ssh agent')?.source ?? '';
    /** The VM's path as this host reaches it. */
    const inVm = (vmPath: string): string => path.join(vm.tmp, path.relative('/tmp', vmPath));
    expect(await agentLists(path.join(inVm(vmDir), 'agent.sock'))).toContain(agent.fingerprint);
    // What a tunnel that is not running leaves: the same shape, nobody holding it.
    const idle = path.join(vm.tmp, 'sandboxd-idle', 'dir');
    mkdirSync(idle, { recursive: true });
    symlinkSync('a-1.sock', path.join(idle, 'agent.sock'));
    await execa(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(path.join(idle, 'a-1.sock'))}, () => process.exit(0))`]);
    // Everything in the VM's /tmp eleven days old by access and modification time, children first
    // (ctime cannot be set back; the rule below ignores it, so it cleans more than Fedora's).
    const old = new Date(Date.now() - 11 * 24 * 3_600_000);
    const age = (entry: string): void => {
      if (lstatSync(entry).isDirectory()) for (const name of readdirSync(entry)) age(path.join(entry, name));
      lutimesSync(entry, old, old);
    };
    for (const name of readdirSync(vm.tmp)) age(path.join(vm.tmp, name));
    // The rule file is outside /tmp, in a directory the VM and this host share.
    const conf = path.join(vmFilesDir(cleanup), 'tmpfiles.conf');
    writeFileSync(conf, 'q /tmp 1777 root root amAM:10d\n');
    await execa('nsenter', [`--mount=/proc/${String(vm.pid)}/ns/mnt`, 'systemd-tmpfiles', '--clean', conf]);
    expect(existsSync(path.join(vm.tmp, 'sandboxd-idle'))).toBe(false);
    expect(await agentLists(path.join(inVm(vmDir), 'agent.sock'))).toContain(agent.fingerprint);
    expect((await listTunnels(env))[0]).toMatchObject({ state: 'ready', restarts: 0 });
  });
});

