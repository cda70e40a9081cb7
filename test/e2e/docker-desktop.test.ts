import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import net from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, listSessions, listTunnels, type Session } from '../../dist/client/index.js';
import { SESSION_MAX_OPEN } from '../../daemon/bridges/bounds.js';
import { Cleanup, cli, cliEnv, daemonPid, makeSandbox, pidAlive, startAgent, waitFor, type Agent } from '../helpers.js';
import { DESKTOP_SOCKET, takeDesktopPath } from '../lab/desktop-path.js';
import { dockerLabUnavailable, startDockerd, type Dockerd } from '../lab/dockerd.js';
import { buildHolder, HOLDER_IN_CONTAINER } from '../lab/holder.js';
import { ATTACK, ATTACKER_TOOLS } from './agent-attack.js';
import { lab } from './lab.js';

const execFileAsync = async (file: string, args: string[], options: { env: NodeJS.ProcessEnv; timeout: number }): Promise<string> => (await promisify(execFile)(file, args, options)).stdout;
const fileCleanup = new Cleanup();
const cleanup = new Cleanup();
// Docker Desktop's path is fixed, so one run at a time emulates it: another run waits its turn.
const unavailable = dockerLabUnavailable(lab) ?? (await takeDesktopPath(fileCleanup, 420));
let dockerd: Dockerd;

beforeAll(async () => {
  if (unavailable === null) dockerd = await startDockerd('desktop', lab, fileCleanup);
}, 180_000);
afterEach(() => cleanup.run());
afterAll(() => fileCleanup.run(), 120_000);

/**
 * Stands in for Docker Desktop's forwarder of the launchd agent: a root:root 0660 socket at the
 * fixed path that pipes each connection to `agent`, or (`hang`) accepts and never answers. Older
 * releases made it 0755 (test/fixtures/mac/docker-desktop.ssh-auth-sock.in-container.ls.txt).
 */
async function desktopSocket(agent: Agent | 'hang', mode = 0o660): Promise<void> {
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    open.add(client);
    client.on('close', () => open.delete(client));
    client.on('error', () => undefined);
    if (agent === 'hang') return;
    const upstream = net.connect(agent.socket);
    upstream.on('error', () => client.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(DESKTOP_SOCKET, resolve));
  chmodSync(DESKTOP_SOCKET, mode);
  cleanup.add(async () => {
    for (const client of open) client.destroy();
    // Closing a listener on a path removes its socket file.
    await new Promise((resolve) => server.close(resolve));
  });
}

/** Colima's VM user: lima gives it the Mac user's uid (501 for the first user) and its own group. */
const VM_USER = { uid: 501, gid: 1000 };

/**
 * Stands in for Colima's `--ssh-agent` socket (the upstream shapes are cited in
 * test/unit/docker-bridges.test.ts): sshd's forwarded socket, bound as the VM's user in a 0700
 * directory of that user's, 0755 before OpenSSH 10.1 and 0600 from it, and lima's symlink to it at
 * the fixed path, in a 0700 /run/host-services of that user's. The listener here runs as root and
 * pipes each connection to `agent`; only the socket's owner and mode are the VM's.
 */
async function colimaSocket(agent: Agent, mode: number): Promise<void> {
  const dir = mkdtempSync('/tmp/ssh-');
  const socket = path.join(dir, `agent.${String(process.pid)}`);
  const server = net.createServer((client) => {
    client.on('error', () => undefined);
    const upstream = net.connect(agent.socket);
    upstream.on('error', () => client.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  chownSync(socket, VM_USER.uid, VM_USER.gid);
  chmodSync(socket, mode);
  chownSync(dir, VM_USER.uid, VM_USER.gid);
  chmodSync(dir, 0o700);
  symlinkSync(socket, DESKTOP_SOCKET);
  const hostServices = path.dirname(DESKTOP_SOCKET);
  chownSync(hostServices, VM_USER.uid, VM_USER.gid);
  chmodSync(hostServices, 0o700);
  cleanup.add(async () => {
    rmSync(DESKTOP_SOCKET, { force: true });
    chownSync(hostServices, 0, 0);
    chmodSync(hostServices, 0o755);
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });
}

/**
 * Stands in for the docker CLI of a Docker Desktop install (or, with `colima`, of Colima's, whose
 * VM is named `colima`): `info` says so, anything else goes to the real CLI (and the engine under
 * test); each `run` the daemon makes is logged in `runs.log` (a helper's when it ends, with its exit:
 * `ran exit=N …`, or `hiccup …` when the runtime failed to start it), and its probes are counted.
 */
function desktopCli(dir: string, product: 'desktop' | 'colima' = 'desktop'): { path: string; probes: () => number; runs: () => string[] } {
  const bin = path.join(dir, 'desktop-bin');
  mkdirSync(bin, { recursive: true });
  const real = execFileSync('sh', ['-c', 'command -v docker'], { encoding: 'utf8' }).trim();
  const log = path.join(dir, 'runs.log');
  writeFileSync(
    path.join(bin, 'docker'),
    [
      '#!/bin/sh',
      `real='${real}'`,
      'if [ "$1" = info ]; then',
      '  out=$("$real" "$@") || exit $?',
      product === 'desktop'
        ? `  printf '%s\\n' "$out" | sed -e 's/"OperatingSystem":"[^"]*"/"OperatingSystem":"Docker Desktop"/'`
        : `  printf '%s\\n' "$out" | sed -e 's/"Name":"[^"]*","Labels"/"Name":"colima","Labels"/'`,
      '  exit 0',
      'fi',
      // sandboxd's helpers (probes, relays; bounded or detached) are logged when their run ends,
      // with its exit: one the runtime failed to start ("OCI runtime … failed", "cannot start a
      // stopped process": dockerd, containerd and runc racing under load) is a hiccup the daemon
      // runs again.
      'case "$1 $*" in "run "*" sandboxd.helper="*)',
      `  err=$(mktemp); "$real" "$@" 2>"$err"; rc=$?; cat "$err" >&2`,
      `  if grep -qE 'OCI runtime|cannot start a stopped process' "$err"; then kind=hiccup; else kind=ran; fi`,
      `  rm -f "$err"; echo "$kind exit=$rc $*" >> '${log}'; exit $rc;;`,
      'esac',
      `[ "$1" = run ] && echo "$*" >> '${log}'`,
      'exec "$real" "$@"',
      '',
    ].join('\n'),
  );
  chmodSync(path.join(bin, 'docker'), 0o755);
  const runs = (): string[] => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter((line) => line !== '') : []);
  return { path: `${bin}:${process.env.PATH ?? ''}`, probes: () => runs().filter((line) => line.startsWith('ran ') && line.includes(' sandboxd.helper=probe ')).length, runs };
}

interface PlanJson {
  session: { ssh: { status: string; bridge?: string; reason?: string }; gitCredentials?: string[] };
  gitCredentials?: unknown;
  plan: { warnings: string[]; args: string[] };
}

interface TunnelJson {
  kind: string;
  state: string;
  socketPath: string;
  restarts: number;
  lastError: string | null;
  hostAgentSocket: string;
}

async function tunnels(env: NodeJS.ProcessEnv): Promise<TunnelJson[]> {
  return JSON.parse((await cli(['tunnels', 'ls', '--json'], env)).stdout) as TunnelJson[];
}

/** A session's own relay container, whose volume (of the same name) its plan mounts. */
function relayOf(session: { plan: { args: string[] } }): string {
  const mount = session.plan.args.find((arg) => arg.startsWith('type=volume,source=sandboxd-relay-'));
  return /source=([^,]+)/.exec(mount ?? '')?.[1] ?? '';
}

/** Where the engine mounted a relay's volume on this host (the "VM"): its socket, as the relay bound it. */
async function volumeSocket(name: string): Promise<string> {
  return path.join((await dockerd.docker(['volume', 'inspect', '--format', '{{.Mountpoint}}', name])).stdout.trim(), 'agent.sock');
}

/** This daemon's relay containers (the sessions' and their spares) and hubs on the engine. */
async function helpers(kind: 'relay' | 'hub'): Promise<string[]> {
  return (await dockerd.docker(['ps', '--all', '--format', '{{.Names}}', '--filter', `name=^sandboxd-${kind}-`])).stdout.split('\n').filter((name) => name !== '');
}

/** Processes whose parent is `pid`: the relay forks one per connection. */
function childrenOf(pid: number): number {
  let count = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) count += 1;
    } catch {
      // gone meanwhile
    }
  }
  return count;
}

describe.skipIf(unavailable !== null && process.env.CI === undefined)('Docker Desktop emulated over a real engine: the built-in agent socket', () => {
  async function setup(desktop: 'agent' | 'empty' | 'hang' | 'none' | 'foreign' | 'colima-0600' | 'colima-0755' | 'colima-0000', agentOptions: { maxFiles?: number } = {}) {
    if (unavailable !== null) throw new Error(`the docker lab is not available: ${unavailable}`);
    const sandbox = makeSandbox(cleanup);
    const shellAgent = await startAgent(sandbox.dir, cleanup, 'shell', agentOptions);
    if (desktop === 'agent') await desktopSocket(shellAgent);
    if (desktop === 'hang') await desktopSocket('hang');
    if (desktop.startsWith('colima-')) await colimaSocket(shellAgent, Number.parseInt(desktop.slice('colima-'.length), 8));
    if (desktop === 'foreign') {
      // Another user's socket, as Colima's can be: root without capabilities may not write it.
      await desktopSocket(shellAgent, 0o600);
      chownSync(DESKTOP_SOCKET, 1234, 1234);
    }
    if (desktop === 'empty') {
      // Docker Desktop's launchd agent, which holds no key: startAgent's key is removed again.
      const launchd = await startAgent(sandbox.dir, cleanup, 'launchd');
      execFileSync('ssh-add', ['-D'], { env: { SSH_AUTH_SOCK: launchd.socket }, stdio: 'ignore' });
      await desktopSocket(launchd);
    }
    const fake = desktopCli(sandbox.dir, desktop.startsWith('colima-') ? 'colima' : 'desktop');
    const env = cliEnv(sandbox, { SSH_AUTH_SOCK: shellAgent.socket, DOCKER_HOST: dockerd.host, PATH: fake.path });
    const plan = async (args: string[] = []): Promise<PlanJson> => {
      // Outside any repository and with no work tree (the sandbox dir holds HOME), so the plan's
      // warnings are the bridge's alone.
      const result = await cli(['plan', '--engine', 'docker', '--no-workdir', '--json', ...args], env, 60_000, sandbox.dir);
      expect(result.stderr).toBe('');
      return JSON.parse(result.stdout) as PlanJson;
    };
    /** A session held by this test (its relay lives as long as it does). */
    const hold = async (user?: { uid: number; gid: number }): Promise<Session> => {
      const session = await acquireSession({ engine: 'docker', env, heartbeat: false, cwd: sandbox.dir, ...(user === undefined ? {} : { containerUser: user }) });
      cleanup.add(() => session.release());
      return session;
    };
    return { sandbox, env, shellAgent, probes: fake.probes, runs: fake.runs, plan, hold };
  }

  /** A container from a held session's plan; detached ones are removed at the end. */
  async function runIn(session: Session, args: string[], detach = false) {
    const applied = applyPlan(['run', ...(detach ? ['--detach'] : ['--rm']), '--network', 'none', ...args], session.plan);
    const result = await dockerd.docker(applied.args);
    if (detach && result.exitCode === 0) {
      const id = result.stdout.trim();
      cleanup.add(() => dockerd.docker(['rm', '--force', id]));
    }
    return result;
  }

  it('root and --user 1000 each get a relay container of their own, mounted read-only; neither session holds gid 0; the hub is the one bridge', async () => {
    const { env, shellAgent } = await setup('agent');
    const run = (userArgs: string[]) =>
      cli(['run', '--quiet', '--engine', 'docker', '--', '--rm', '--network', 'none', ...userArgs, dockerd.image, 'sh', '-c', 'id -G; ssh-add -l'], env, 90_000);
    const root = await run([]);
    expect(root.stderr).toBe('');
    expect(root.stdout.split('\n')[0]).toBe('0');
    expect(root.stdout).toContain(shellAgent.fingerprint);
    const user = await run(['--user', '1000:1000']);
    expect(user.stderr).toBe('');
    expect(user.stdout.split('\n')[0]).toBe('1000');
    expect(user.stdout).toContain(shellAgent.fingerprint);
    expect(user.exitCode).toBe(0);
    const tunnels = JSON.parse((await cli(['tunnels', 'ls', '--json'], env)).stdout) as { kind: string; hostAgentSocket: string }[];
    expect(tunnels).toEqual([expect.objectContaining({ kind: 'container-relay', hostAgentSocket: DESKTOP_SOCKET })]);
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { engines: unknown[] };
    expect(status.engines).toEqual([
      expect.objectContaining({ kind: 'docker-desktop', bridge: 'builtin', probe: expect.objectContaining({ state: 'verified', keys: 1 }) as unknown }),
    ]);
    const text = (await cli(['status'], env)).stdout;
    expect(text).toContain(`Docker Desktop (docker-desktop) at ${dockerd.host}: bridge builtin`);
    expect(text).toMatch(/probe: verified, the agent at \/run\/host-services\/ssh-auth\.sock lists 1 key\(s\) \(\d+s ago\)/);
  });

  it('20 concurrent sessions cause one probe; an engine restart causes one more', async () => {
    const { env, probes, plan } = await setup('agent');
    const results = await Promise.all(Array.from({ length: 20 }, () => cli(['plan', '--engine', 'docker', '--container-user', '1000', '--json'], env, 120_000)));
    for (const result of results) expect((JSON.parse(result.stdout) as PlanJson).session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    expect(probes()).toBe(1);
    await dockerd.restart();
    expect((await plan()).session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    expect((await plan()).session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    expect(probes()).toBe(2);
  }, 180_000);

  it('a probe that hangs is cut off with a warning', async () => {
    const { plan } = await setup('hang');
    const { session, plan: body } = await plan();
    expect(session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    // The relay gives up after 5 s; an engine slow to start its container is cut off at 8 s first.
    expect(body.warnings).toEqual([
      expect.stringMatching(
        /^the agent socket of Docker Desktop is used unverified: (the agent at \/run\/host-services\/ssh-auth\.sock did not answer within 5 s|the probe of \/run\/host-services\/ssh-auth\.sock did not finish within 8000 ms and was cut off)$/,
      ),
    ]);
  });

  it('a Desktop agent without the keys of the shell\'s agent gives the warning with the remedy', async () => {
    const { plan } = await setup('empty');
    const { plan: body } = await plan();
    expect(body.warnings).toContainEqual(expect.stringMatching(/^Docker Desktop serves the agent it saw when it started, not this shell's SSH_AUTH_SOCK: 1 of your 1 key\(s\) are missing in it \(it holds 0\)\. .*launchctl setenv SSH_AUTH_SOCK/));
  });

  it('no socket in the VM: skipped with the remedy under auto, SSH_BRIDGE_UNSUPPORTED under on', async () => {
    const { env, plan } = await setup('none');
    const { session, plan: body } = await plan();
    expect(session.ssh).toEqual({ status: 'skipped', reason: `Docker Desktop: the engine's VM has no ${DESKTOP_SOCKET}` });
    expect(body.warnings).toContainEqual(expect.stringContaining('Update Docker Desktop'));
    const on = await cli(['plan', '--engine', 'docker', '--ssh-agent', 'on', '--json'], env, 60_000);
    expect(on.exitCode).toBe(1);
    expect(JSON.parse(on.stdout)).toEqual({
      error: {
        code: 'SSH_BRIDGE_UNSUPPORTED',
        message: `ssh-agent is on but Docker Desktop: the engine's VM has no ${DESKTOP_SOCKET}`,
        remedy: 'Update Docker Desktop (it serves the agent at /run/host-services/ssh-auth.sock since 2.2), or pass --ssh-agent off.',
      },
    });
  });

  it('git credentials: refused with the reason and the remedy, never carried through the hub; the agent still is', async () => {
    // Docker Desktop's VM reaches the host only through its forwarder (standing in here: the fake
    // CLI and socket above); the engine, its hub and the relay containers are real.
    const { plan } = await setup('agent');
    const { session, plan: body, gitCredentials } = await plan(['--git-credentials', 'git.example.com']);
    expect(session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    const reason = "Docker Desktop carries only its own agent into its VM: no socket of the session's own reaches its containers, so no request could be told from another container's";
    expect(gitCredentials).toEqual({ status: 'skipped', hosts: ['git.example.com'], reason });
    expect(session.gitCredentials).toEqual([]);
    expect(body.warnings).toContain(
      `git: HTTPS credentials for git.example.com are not served: ${reason} (remedy: use an ssh remote (the agent is forwarded), a Podman machine (\`--engine podman\`), or Docker Engine on Linux)`,
    );
    expect(JSON.stringify(body)).not.toContain('GIT_CONFIG_COUNT');
    expect(JSON.stringify(body)).not.toContain('/run/sandboxd/git-credential');
  });

  it.each(['0600', '0755'] as const)(
    'Colima (lima\'s link to a socket of the VM\'s user, mode %s): probed and relayed as its owner; root, the VM\'s user and --user 1000 get the agent',
    async (mode) => {
      const { env, shellAgent, runs } = await setup(`colima-${mode}`);
      for (const userArgs of [[], ['--user', `${String(VM_USER.uid)}:${String(VM_USER.gid)}`], ['--user', '1000:1000']]) {
        const result = await cli(['run', '--engine', 'docker', '--ssh-agent', 'on', '--', '--rm', '--network', 'none', ...userArgs, dockerd.image, 'sh', '-c', 'id -G; ssh-add -l'], env, 90_000);
        expect(result.stderr).toBe('');
        expect(result.stdout).toContain(shellAgent.fingerprint);
        // A non-root session holds no group 0.
        if (userArgs.length > 0) expect(result.stdout.split('\n')[0]?.split(' ')).not.toContain('0');
        expect(result.exitCode).toBe(0);
      }
      const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { engines: unknown[] };
      expect(status.engines).toEqual([expect.objectContaining({ kind: 'colima', bridge: 'builtin', probe: expect.objectContaining({ state: 'verified', keys: 1 }) as unknown })]);
      // Asked as root (denied), then as the owner; the engine's hub runs as the owner, and no helper holds gid 0.
      const probes = runs().filter((line) => line.startsWith('ran ') && line.includes(' sandboxd.helper=probe '));
      expect(probes.map((line) => `${/^ran exit=(\d+)/.exec(line)?.[1] ?? ''} ${/--user (\S+)/.exec(line)?.[1] ?? ''}`)).toEqual(['5 0:0', '0 501:1000']);
      // A start the runtime failed is run again, three times in all for each user at most.
      expect(runs().filter((line) => line.startsWith('hiccup ') && line.includes(' sandboxd.helper=probe ')).length).toBeLessThanOrEqual(4);
      const hubs = runs().filter((line) => line.startsWith('ran ') && line.includes('--name sandboxd-hub-'));
      expect(hubs).toHaveLength(1);
      expect(hubs[0]).toContain('--user 501:1000');
      for (const line of runs()) expect(line).not.toContain('--group-add');
    },
    240_000,
  );

  it('a Colima socket its owner may not reach either: named as a permission failure (AGENT_SOCKET_DENIED), never "restart Colima with --ssh-agent"', async () => {
    const { env, plan } = await setup('colima-0000');
    const { session, plan: body } = await plan();
    const reason = `Colima: permission denied: its owner (uid 501) may not connect to ${DESKTOP_SOCKET} in the engine's VM (owner uid 501, gid 1000, mode 0000)`;
    expect(session.ssh).toEqual({ status: 'skipped', reason });
    expect(body.warnings.join('\n')).toContain('colima ssh -- ls -lL /run/host-services/ssh-auth.sock');
    expect(body.warnings.join('\n')).not.toContain('--ssh-agent`');
    const on = await cli(['plan', '--engine', 'docker', '--ssh-agent', 'on', '--json'], env, 60_000);
    expect(on.exitCode).toBe(1);
    expect(JSON.parse(on.stdout)).toMatchObject({ error: { code: 'AGENT_SOCKET_DENIED', message: `ssh-agent is on but ${reason}` } });
  });

  const planAs1000 = ['--container-user', '1000:1000'];

  it('a built-in socket root without capabilities may not write (another user\'s): probed and served as its owner, never "nothing answers"', async () => {
    const { shellAgent, hold } = await setup('foreign');
    const session = await hold({ uid: 1000, gid: 1000 });
    expect(session.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    const result = await runIn(session, ['--user', '1000:1000', dockerd.image, 'ssh-add', '-l']);
    expect(result.stdout).toContain(shellAgent.fingerprint);
  });


  it('a session\'s relay volume is read-only in its container: a uid-1000 container cannot replace its own socket, and another session has its own', async () => {
    const { shellAgent, hold } = await setup('agent');
    const attacker = await hold({ uid: 1000, gid: 1000 });
    expect(attacker.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    const started = await runIn(attacker, ['--user', '1000:1000', ...ATTACKER_TOOLS, dockerd.image, 'sh', '-c', ATTACK, 'attack', '/run/sandboxd/ssh'], true);
    expect(started.exitCode).toBe(0);
    const id = started.stdout.trim();
    const attempted = await waitFor(async () => {
      const logs = await dockerd.docker(['logs', id]);
      return logs.stdout.includes('attacked') ? logs.stdout : null;
    }, 'the attack to finish', 30_000, 200);
    expect(attempted.trim()).toBe('attacked');

    const other = await hold({ uid: 1000, gid: 1000 });
    expect(relayOf(other)).not.toBe(relayOf(attacker));
    const result = await runIn(other, ['--user', '1000:1000', dockerd.image, 'ssh-add', '-l']);
    expect(result.stdout).toContain(shellAgent.fingerprint);
    expect(readdirSync(path.dirname(await volumeSocket(relayOf(attacker))))).toEqual(['agent.sock']);
  });

  it('an image whose ssh-add fakes "bind source path does not exist" changes nothing for other sessions: the probe runs sandboxd\'s own image', async () => {
    const { sandbox, env, runs, plan } = await setup('agent');
    // Docker's own wording for a VM without the socket, printed by a fake ssh-add that exits 125.
    const fake = path.join(sandbox.dir, 'ssh-add');
    writeFileSync(fake, `#!/bin/sh\necho 'docker: Error response from daemon: invalid mount config for type "bind": bind source path does not exist: ${DESKTOP_SOCKET}' >&2\nexit 125\n`, { mode: 0o755 });
    const created = await dockerd.docker(['create', dockerd.image, 'true']);
    const id = created.stdout.trim();
    expect((await dockerd.docker(['cp', fake, `${id}:/usr/bin/ssh-add`])).exitCode).toBe(0);
    const evil = 'localhost/sandboxd-evil:latest';
    expect((await dockerd.docker(['commit', id, evil])).exitCode).toBe(0);
    await dockerd.docker(['rm', id]);
    cleanup.add(() => dockerd.docker(['rmi', '--force', evil]));

    // An older client still names its image; nothing runs it.
    const first = await plan(['--image', evil]);
    const second = await plan(planAs1000);
    expect(first.session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    expect(second.session.ssh).toMatchObject({ status: 'forwarded', bridge: 'desktop' });
    expect(runs().filter((line) => line.includes('sandboxd-evil'))).toEqual([]);
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { engines: unknown[] };
    expect(status.engines).toEqual([expect.objectContaining({ probe: expect.objectContaining({ state: 'verified', keys: 1 }) as unknown })]);
  });

  it(`a container holding hundreds of connections is served ${String(SESSION_MAX_OPEN)} by its relay, never forked for the rest; another session and the user's own ssh-add answer (an agent under a low fd limit); sessions ls and tunnels ls count the refusals`, async () => {
    const { sandbox, env, shellAgent, hold } = await setup('agent', { maxFiles: 100 });
    const holder = buildHolder(sandbox.dir);
    const attacker = await hold({ uid: 1000, gid: 1000 });
    const relay = relayOf(attacker);
    const pid = Number((await dockerd.docker(['inspect', '--format', '{{.State.Pid}}', relay])).stdout.trim());
    const started = await runIn(attacker, [...holder, '--user', '1000:1000', dockerd.image, HOLDER_IN_CONTAINER, '/run/sandboxd/ssh/agent.sock', '300', '600'], true);
    expect(started.exitCode).toBe(0);
    const line = await waitFor(async () => /answered (\d+) closed (\d+)/.exec((await dockerd.docker(['logs', started.stdout.trim()])).stdout), 'the container to hold its connections', 90_000, 200);
    expect({ answered: Number(line[1]), closed: Number(line[2]) }).toEqual({ answered: SESSION_MAX_OPEN, closed: 300 - SESSION_MAX_OPEN });
    expect(childrenOf(pid)).toBeLessThanOrEqual(SESSION_MAX_OPEN);
    expect(pidAlive(pid)).toBe(true);

    const other = await hold({ uid: 1000, gid: 1000 });
    expect((await runIn(other, ['--user', '1000:1000', dockerd.image, 'ssh-add', '-l'])).stdout).toContain(shellAgent.fingerprint);
    const own = await execFileAsync('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: shellAgent.socket }, timeout: 10_000 });
    expect(own).toContain(shellAgent.fingerprint);
    // The relay says what it refused once a second.
    const refused = await waitFor(async () => (await listSessions(env)).find((session) => session.id === attacker.id && session.refused >= 300 - SESSION_MAX_OPEN), 'sessions ls to count the refusals', 20_000, 500);
    expect(refused.refused).toBe(300 - SESSION_MAX_OPEN);
    expect((await listSessions(env)).find((session) => session.id === other.id)?.refused).toBe(0);
    expect(await listTunnels(env)).toEqual([expect.objectContaining({ kind: 'container-relay', endpoints: 2, refused: 300 - SESSION_MAX_OPEN })]);
  }, 180_000);

  it('a container whose session was released loses the agent at once, for good: its relay container is gone', async () => {
    const { env, hold } = await setup('agent');
    const session = await hold({ uid: 1000, gid: 1000 });
    const relay = relayOf(session);
    const started = await runIn(session, ['--user', '1000:1000', dockerd.image, 'sh', '-c', 'while true; do if ssh-add -l >/dev/null 2>&1; then echo ok; else echo lost; fi; sleep 0.3; done'], true);
    const id = started.stdout.trim();
    const logs = async () => (await dockerd.docker(['logs', id])).stdout.split('\n').filter((entry) => entry !== '');
    await waitFor(async () => (await logs()).includes('ok'), 'the container to use the agent', 30_000, 200);
    await session.release();
    await waitFor(async () => (await logs()).filter((entry) => entry === 'lost').length >= 3, 'the container to lose the agent', 20_000, 200);
    const lines = await logs();
    expect(lines.slice(lines.indexOf('lost'))).not.toContain('ok');
    expect(await helpers('relay')).not.toContain(relay);
    expect((await listSessions(env)).map((entry) => entry.id)).not.toContain(session.id);
  }, 120_000);

  it('a session\'s relay whose socket was replaced anyway (from the host, standing in for a bug) binds it again and says so', async () => {
    const { env, shellAgent, hold } = await setup('agent');
    const session = await hold({ uid: 1000, gid: 1000 });
    const socket = await volumeSocket(relayOf(session));
    // Another listener where the relay's socket was: nothing a session can do (its mount is read-only), but a bug could.
    renameSync(socket, `${socket}.moved`);
    const impostor = net.createServer((client) => client.destroy());
    await new Promise<void>((resolve) => impostor.listen(socket, resolve));
    cleanup.add(() => new Promise((resolve) => impostor.close(resolve)));

    const noticed = await waitFor(async () => (await tunnels(env)).find((bridge) => bridge.kind === 'container-relay' && bridge.restarts > 0), 'the relay to notice', 60_000, 500);
    expect(noticed.lastError).toMatch(/agent\.sock was not the socket it bound; bound it again/);
    expect((await runIn(session, ['--user', '1000:1000', dockerd.image, 'ssh-add', '-l'])).stdout).toContain(shellAgent.fingerprint);
  }, 180_000);

  it('a graceful restart leaves a running container\'s relay serving; the renewal takes it over', async () => {
    const { sandbox, env, shellAgent } = await setup('agent');
    const client = cli(['run', '--quiet', '--engine', 'docker', '--', '--rm', '--network', 'none', '--user', '1000:1000', dockerd.image, 'sh', '-c', 'i=0; while [ $i -lt 300 ]; do i=$((i+1)); ssh-add -l >/dev/null 2>&1 && echo "ok $i" || echo "lost $i"; sleep 0.3; done'], env, 200_000);
    cleanup.add(() => {
      client.kill('SIGTERM');
      return client.catch(() => undefined);
    });
    let out = '';
    client.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('ok '), 'the container to use the agent', 60_000, 200);
    const [before] = await listSessions(env);
    expect((await cli(['restart'], env)).exitCode).toBe(0);
    await waitFor(async () => (await listSessions(env)).some((session) => session.id !== before?.id), 'the client to renew its lease', 30_000, 200);
    const log = () => readdirSync(sandbox.env.SANDBOXD_LOG_DIR).map((name) => readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, name), 'utf8')).join('\n');
    await waitFor(() => log().includes('a renewed session took its socket over'), 'the renewal to take the relay over', 10_000, 100);
    const seen = out.length;
    await waitFor(() => out.slice(seen).includes('ok '), 'the container to use the agent again', 30_000, 200);
    // The relay kept serving while no daemon ran: nothing was lost.
    expect(out).not.toContain('lost');
    expect(await listTunnels(env)).toEqual([expect.objectContaining({ kind: 'container-relay', endpoints: 1 })]);
    expect(shellAgent.fingerprint).not.toBe('');
  }, 180_000);

  it('kill -9 of the daemon: the next daemon\'s start-up removes its relay containers, hub and volumes, and never another owner\'s', async () => {
    const { sandbox, env, plan } = await setup('agent');
    // The engine is this file's: other tests' helpers may be on it, under their own owner labels.
    const volumesNow = async (): Promise<string[]> => (await dockerd.docker(['volume', 'ls', '--quiet', '--filter', 'name=^sandboxd-'])).stdout.split('\n').filter((name) => name !== '');
    const before = new Set([...(await helpers('hub')), ...(await helpers('relay')), ...(await volumesNow())]);
    await plan(planAs1000);
    const hubs = (await helpers('hub')).filter((name) => !before.has(name));
    expect(hubs).toHaveLength(1);
    // Helpers labelled by another sandboxd (another user or state dir) on the same engine.
    const other = ['--label', 'sandboxd.owner=0123456789abcdef', '--label', 'sandboxd.helper=relay'];
    expect((await dockerd.docker(['volume', 'create', ...other, 'sandboxd-relay-other'])).exitCode).toBe(0);
    expect((await dockerd.docker(['run', '--detach', '--name', 'sandboxd-relay-other', ...other, '--network', 'none', dockerd.image, 'sleep', '600'])).exitCode).toBe(0);
    cleanup.add(async () => {
      await dockerd.docker(['rm', '--force', 'sandboxd-relay-other']);
      await dockerd.docker(['volume', 'rm', '--force', 'sandboxd-relay-other']);
    });
    const daemon = daemonPid(sandbox.env) ?? 0;
    process.kill(daemon, 'SIGKILL');
    await waitFor(() => !pidAlive(daemon), 'the daemon to die');
    expect((await dockerd.docker(['inspect', '--format', '{{.State.Running}}', hubs[0] ?? ''])).stdout).toBe('true');

    expect((await cli(['start'], env)).exitCode).toBe(0);
    await waitFor(async () => {
      const left = [...(await helpers('hub')), ...(await helpers('relay'))].filter((name) => name !== 'sandboxd-relay-other' && !before.has(name));
      const volumes = (await volumesNow()).filter((name) => name !== 'sandboxd-relay-other' && !before.has(name));
      return left.length === 0 && volumes.length === 0;
    }, 'the relay containers, hub and volumes to be removed', 60_000, 200);
    expect((await dockerd.docker(['inspect', '--format', '{{.State.Running}}', 'sandboxd-relay-other'])).stdout).toBe('true');
    expect((await dockerd.docker(['volume', 'inspect', '--format', '{{.Name}}', 'sandboxd-relay-other'])).stdout).toBe('sandboxd-relay-other');
  }, 180_000);
});
