import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { build } from 'esbuild';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { forwardThroughSandboxd, releaseSandboxd, type AdapterLog, type ForwardOptions } from '../../dist/client/llxprt/index.js';
import { mountDestination, parseRunArgs } from '../../client/run-args.js';
import { Cleanup, cli, cliEnv, daemonsFor, makeSandbox, startAgent, startDaemon, waitFor, type Agent, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';
import { startRemoteVm } from './remote-lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());
const perTest = new Cleanup();
afterEach(() => perTest.run());

const ADAPTER = path.join(import.meta.dirname, '../../dist/client/llxprt/index.js');
const GIT_FILES = ['.gitconfig', '.config/git/config', '.gitignore_global', '.ssh/known_hosts'];
const CREDENTIAL_IN_CONTAINER = '/run/sandboxd/sockets/credential-proxy/agent.sock';

/** What the adapter said, by kind: the lines llxprt's user would see, and the debug ones. */
function recordingLog(): AdapterLog & { warnings: string[]; debugLines: string[] } {
  const warnings: string[] = [];
  const debugLines: string[] = [];
  return {
    warnings,
    debugLines,
    warn: (message) => warnings.push(message),
    debug: (message) => debugLines.push(message),
  };
}

interface LlxprtLaunch {
  /** The one array llxprt changes in place from its first step to its spawn. */
  args: string[];
  /** Whether llxprt's own agent step was skipped: the container's agent is sandboxd's. */
  forwarded: boolean;
  /** What the credential step gave the container as LLXPRT_CREDENTIAL_SOCKET. */
  credentialSocket: string;
}

interface LaunchShape {
  home: string;
  cwd: string;
  image: string;
  /** llxprt's SANDBOX_SET_UID_GID decision: the container runs as this host user (root here). */
  setUidGid: boolean;
  /** The host socket llxprt's credential proxy listens on (in its tmpdir). */
  proxySocket: string;
  env: NodeJS.ProcessEnv;
  options?: Omit<ForwardOptions, 'env' | 'cwd' | 'setUidGid' | 'credentialSocket'>;
  extraFlags?: string[];
}

/**
 * llxprt's launcher with docs/integrations/llxprt.patch applied, step by step, in its order and
 * with its argument shapes (../shared/llxprt.md, read at llxprt-code f80a695):
 * prepareContainerImageAndArgs builds `args`; the patch's sandboxd step takes one session for the
 * agent and the credential proxy (started first, as createAndStartProxy does: here a socket that
 * listens) and merges it; prepareContainerNetworkAndEnv runs llxprt's own Linux agent forwarding
 * only where sandboxd does not forward the agent; then the name, addContainerEnvVars,
 * setupCredentialProxy (`--env LLXPRT_CREDENTIAL_SOCKET=…`, sandboxd's path when it carries the
 * socket, and the capability env file) and setupContainerUser. The spawn (runLlxprtContainer)
 * adds only the image and command: no global arguments, no environment of its own.
 */
async function llxprtLaunch(shape: LaunchShape): Promise<LlxprtLaunch> {
  const { home, cwd, env } = shape;
  const containerHome = shape.setUidGid ? home : '/home/node';
  const tmp = path.dirname(shape.proxySocket);
  const args = ['run', '-i', '--rm', '--init', '--workdir', cwd, '--cap-drop=ALL', '--security-opt', 'no-new-privileges', ...(shape.extraFlags ?? []), '--network', 'none'];
  args.push('--volume', `${cwd}:${cwd}`);
  args.push('--volume', `${home}/.llxprt:${home}/.llxprt:z`, '--env', `LLXPRT_CONFIG_HOME=${home}/.llxprt`);
  for (const file of GIT_FILES.filter((name) => existsSync(path.join(home, name)))) {
    args.push('--volume', `${home}/${file}:${home}/${file}:ro`);
    if (containerHome !== home) args.push('--volume', `${home}/${file}:${containerHome}/${file}:ro`);
  }
  args.push('--volume', `${tmp}:${tmp}`);

  const sandboxd = await forwardThroughSandboxd({ command: 'podman', image: shape.image }, args, {
    ...shape.options,
    env,
    cwd,
    setUidGid: shape.setUidGid,
    credentialSocket: () => Promise.resolve(shape.proxySocket),
  });
  const agentSetting = env.LLXPRT_SANDBOX_SSH_AGENT ?? env.SANDBOX_SSH_AGENT;
  if (!sandboxd.sshAgent && agentSetting !== 'off' && env.SSH_AUTH_SOCK !== undefined && env.SSH_AUTH_SOCK !== '' && existsSync(env.SSH_AUTH_SOCK)) {
    // llxprt's own Linux agent step (setupSshAgentLinux).
    args.push('--volume', `${env.SSH_AUTH_SOCK}:/ssh-agent:z`, '--env', 'SSH_AUTH_SOCK=/ssh-agent');
  }

  args.push('--name', 'llxprt-sandbox-0', '--hostname', 'llxprt-sandbox-0');
  args.push('--env', 'TERM=xterm-256color', '--env', 'GIT_DISCOVERY_ACROSS_FILESYSTEM=1', '--env', 'SANDBOX=llxprt-sandbox-0');

  const credentialSocket = sandboxd.credentialSocket ?? shape.proxySocket;
  args.push('--env', `LLXPRT_CREDENTIAL_SOCKET=${credentialSocket}`);
  const envFile = path.join(home, 'capability.env');
  writeFileSync(envFile, 'LLXPRT_CAPABILITY_TOKEN=0123456789abcdef\n', { mode: 0o600 });
  args.push('--env-file', envFile);

  // setupContainerUser: llxprt runs the image's node user, or root that becomes the host user
  // (useradd + su, which the lab image stands in for with --user: the host user is root here).
  if (shape.setUidGid) args.push('--user', String(process.getuid?.() ?? 0), '--env', `HOME=${home}`);
  perTest.add(() => releaseSandboxd(args));
  return { args, forwarded: sandboxd.sshAgent, credentialSocket };
}

/** The daemon's log lines of one kind (`msg`), as the daemon wrote them. */
function daemonLog(env: NodeJS.ProcessEnv, msg: string): { sessionId?: string; clientPid?: number }[] {
  const file = path.join(env.SANDBOXD_LOG_DIR ?? '', 'sandboxd.log');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.includes(`"msg":${JSON.stringify(msg)}`))
    .map((line) => JSON.parse(line) as { sessionId?: string; clientPid?: number });
}

/** executeContainerSandbox: `spawn(config.command, args, { stdio: 'inherit' })` once the image and command are pushed. */
function runLlxprtContainer(launch: LlxprtLaunch, image: string, script: string, env: NodeJS.ProcessEnv) {
  return execa('podman', [...launch.args, image, 'sh', '-c', script], { env, extendEnv: false, reject: false, timeout: 90_000, input: '' });
}

function destinations(args: readonly string[]): string[] {
  return parseRunArgs(args).options.map(mountDestination).filter((target) => target !== null);
}

function envValues(args: readonly string[], name: string): string[] {
  return parseRunArgs(args)
    .options.filter((option) => option.name === 'env' && option.value?.startsWith(`${name}=`) === true)
    .map((option) => option.value?.slice(name.length + 1) ?? '');
}

async function sessionsOf(env: NodeJS.ProcessEnv): Promise<{ id: string; label: string | null; clientPid: number }[]> {
  return JSON.parse((await cli(['sessions', 'ls', '--json'], env)).stdout) as { id: string; label: string | null; clientPid: number }[];
}

/** What forwardThroughSandboxd resolves to when llxprt's own steps carry everything. */
const NOTHING = { sshAgent: false, credentialSocket: undefined };

/** The overrides a plan makes in a repository: notices, for debugging, never warnings of every launch. */
const OVERRIDE_NOTICES = [
  expect.stringMatching(/^git: safe\.directory is set to .*\/project, .*\/project\/\.git in the sandbox/),
  expect.stringMatching(/^git: core\.sshCommand is set to "ssh -o UserKnownHostsFile=/),
];

describe.skipIf(labMissing)('llxprt\'s launcher with the adapter, against the real podman', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let agent: Agent;
  let proxy: Agent;
  let project: string;

  beforeAll(async () => {
    const lab = podmanLab();
    sandbox = makeSandbox(cleanup);
    // llxprt's image runs as its node user (USER node: uid 1000, HOME /home/node).
    image = 'localhost/sandboxd-lab-llxprt';
    writeFileSync(path.join(sandbox.dir, 'Containerfile'), `FROM ${lab.image}\nUSER 1000:1000\nENV HOME=/home/node\n`);
    await execa('podman', ['build', '--pull=never', '-q', '-t', image, sandbox.dir], { env: { ...process.env, ...lab.env } });
    cleanup.add(() => execa('podman', ['rmi', '-f', image], { env: { ...process.env, ...lab.env }, reject: false }));
    const { home } = sandbox;
    // llxprt mounts the whole tmpdir, and this host home lives in it: uid 1000 must traverse it, as
    // it can a real /home/<user>.
    chmodSync(sandbox.dir, 0o755);
    for (const dir of ['.llxprt', '.config/git', '.ssh']) mkdirSync(path.join(home, dir), { recursive: true });
    writeFileSync(path.join(home, '.gitconfig'), '[user]\n\tname = Host User\n\temail = host@example.com\n');
    writeFileSync(path.join(home, '.config/git/config'), '[core]\n\tautocrlf = false\n');
    writeFileSync(path.join(home, '.gitignore_global'), '*.secret\n');
    writeFileSync(path.join(home, '.ssh/known_hosts'), 'example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n');
    project = path.join(sandbox.dir, 'project');
    mkdirSync(project, { recursive: true });
    await execa('git', ['init', '-q', '-b', 'main'], { cwd: project });
    await execa('git', ['-c', 'user.name=Host User', '-c', 'user.email=host@example.com', 'commit', '-q', '--allow-empty', '-m', 'first'], { cwd: project });
    // The image's node user (uid 1000) works in the tree, as in llxprt's default container.
    await execa('chown', ['-R', '1000:1000', project]);
    agent = await startAgent(sandbox.dir, cleanup);
    // Stands in for llxprt's credential proxy: a socket in its tmpdir that only its owner (root)
    // may open, which a uid-1000 container must reach.
    proxy = await startAgent(sandbox.dir, cleanup, 'proxy');
    chmodSync(proxy.socket, 0o600);
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket });
    await startDaemon(env, cleanup);
  });

  it('as llxprt\'s node user: the agent, the host identity, a commit, the credential proxy; one destination each', async () => {
    const log = recordingLog();
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: false, proxySocket: proxy.socket, env, options: { log } });
    expect(launch.forwarded).toBe(true);
    expect(launch.credentialSocket).toBe(CREDENTIAL_IN_CONTAINER);
    // The overrides the plan makes in a repository are named for debugging; nothing needs action.
    expect(log.warnings).toEqual([]);
    expect(log.debugLines).toEqual(expect.arrayContaining(OVERRIDE_NOTICES));
    const mounted = destinations(launch.args);
    expect(new Set(mounted).size).toBe(mounted.length);
    expect(envValues(launch.args, 'SSH_AUTH_SOCK')).toEqual(['/run/sandboxd/ssh/agent.sock']);
    expect(envValues(launch.args, 'LLXPRT_CREDENTIAL_SOCKET')).toEqual([CREDENTIAL_IN_CONTAINER]);
    const sessions = await sessionsOf(env);
    expect(sessions.filter((session) => session.label === 'llxprt')).toHaveLength(1);
    expect(launch.args.filter((arg) => arg.startsWith('sandboxd.session='))).toEqual([`sandboxd.session=${sessions[0]?.id ?? ''}`]);

    const script = [
      'echo "uid=$(id -u) home=$HOME"',
      'ssh-add -l',
      'SSH_AUTH_SOCK="$LLXPRT_CREDENTIAL_SOCKET" ssh-add -l',
      'git config user.email',
      'echo change > file.txt && git add file.txt && git commit -q -m "from the sandbox" && echo committed',
      'touch .git/hooks/post-commit 2>/dev/null && echo hooks-writable || echo hooks-read-only',
    ].join('; ');
    const result = await runLlxprtContainer(launch, image, script, env);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe('uid=1000 home=/home/node');
    expect(lines[1]).toContain(agent.fingerprint);
    expect(lines[2]).toContain(proxy.fingerprint);
    expect(lines.slice(3)).toEqual(['host@example.com', 'committed', 'hooks-read-only']);
    // The host's own git (root, in a tree uid 1000 owns) reads the repository whole, with the
    // sandbox's commit by the host identity, brought home from the sandbox's git dir while
    // llxprt's session runs (a sync follows a commit within about a second; the bound is generous).
    const hostGit = (...gitArgs: string[]) => execa('git', ['-c', 'safe.directory=*', ...gitArgs], { cwd: project });
    const history = async () => (await hostGit('log', '--format=%an <%ae> %s')).stdout.split('\n');
    await waitFor(async () => (await history()).length === 2, "the sandbox's commit on the host", 20_000);
    await hostGit('fsck', '--strict');
    expect(await history()).toEqual(['Host User <host@example.com> from the sandbox', 'Host User <host@example.com> first']);
  });

  it('one launch is one session: the agent and the credential proxy come in one acquire', async () => {
    const ours = (entries: { clientPid?: number }[]) => entries.filter((entry) => entry.clientPid === process.pid);
    const before = ours(daemonLog(env, 'session acquired')).length;
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: false, proxySocket: proxy.socket, env, options: { log: recordingLog() } });
    expect(launch).toMatchObject({ forwarded: true, credentialSocket: CREDENTIAL_IN_CONTAINER });
    const id = launch.args.find((arg) => arg.startsWith('sandboxd.session='))?.slice('sandboxd.session='.length);
    expect(id).toBeDefined();
    // Once the daemon has logged the session's end, it has logged every acquire before it.
    await releaseSandboxd(launch.args);
    await waitFor(() => daemonLog(env, 'session ended').some((entry) => entry.sessionId === id), 'the daemon to log the end of the launch\'s session');
    expect(ours(daemonLog(env, 'session acquired')).slice(before).map((entry) => (entry as { sessionId?: string }).sessionId)).toEqual([id]);
  });

  it('SANDBOX_SET_UID_GID: the plan is the host user\'s, whose HOME is the host home', async () => {
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: true, proxySocket: proxy.socket, env, options: { log: recordingLog() } });
    expect(launch.args.join(' ')).not.toContain('/home/node');
    const result = await runLlxprtContainer(launch, image, 'echo "uid=$(id -u) home=$HOME"; ssh-add -l; SSH_AUTH_SOCK="$LLXPRT_CREDENTIAL_SOCKET" ssh-add -l; git config user.email', env);
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe(`uid=${String(process.getuid?.() ?? 0)} home=${sandbox.home}`);
    expect(lines[1]).toContain(agent.fingerprint);
    expect(lines[2]).toContain(proxy.fingerprint);
    expect(lines[3]).toBe('host@example.com');
  });

  it('a Podman machine (podman over ssh, as on a Mac): both sockets through tunnels and no host network where llxprt\'s podman picks the connection itself, llxprt\'s own path where it would not', async () => {
    const conf = await startRemoteVm(sandbox, [], perTest);
    // On a Mac podman always goes through a connection; here CONTAINER_CONNECTION says which.
    const vmEnv = { ...env, CONTAINERS_CONF: conf, CONTAINER_CONNECTION: 'vm' };
    const log = recordingLog();
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: false, proxySocket: proxy.socket, env: vmEnv, options: { log } });
    // The overrides the plan makes in a repository are named for debugging; nothing needs action.
    expect(log.warnings).toEqual([]);
    expect(log.debugLines).toEqual(expect.arrayContaining(OVERRIDE_NOTICES));
    expect(launch).toMatchObject({ forwarded: true, credentialSocket: CREDENTIAL_IN_CONTAINER });
    expect(parseRunArgs(launch.args).options.filter((option) => option.name === 'network').map((option) => option.value)).toEqual(['none']);
    // The agent's and the proxy's, beside the relays earlier launches left idle in this daemon.
    const bridges = JSON.parse((await cli(['tunnels', 'ls', '--json'], vmEnv)).stdout) as { kind: string; connection: string | null }[];
    expect(bridges.filter((bridge) => bridge.connection === 'vm').map((bridge) => bridge.kind)).toEqual(['tunnel', 'tunnel']);
    const result = await runLlxprtContainer(launch, image, 'id -u; ssh-add -l; SSH_AUTH_SOCK="$LLXPRT_CREDENTIAL_SOCKET" ssh-add -l; git config user.email', vmEnv);
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe('1000');
    expect(lines[1]).toContain(agent.fingerprint);
    expect(lines[2]).toContain(proxy.fingerprint);
    expect(lines[3]).toBe('host@example.com');

    // A tunnel forced onto this host's own podman would need `podman --connection vm run`, which
    // llxprt's spawn does not pass: llxprt's own path runs, and the user is told how to align them.
    const forced = recordingLog();
    const args = ['run', '--rm'];
    expect(await forwardThroughSandboxd({ command: 'podman' }, args, { env: { ...env, CONTAINERS_CONF: conf, SANDBOXD_SSH_BRIDGE: 'tunnel' }, cwd: project, log: forced })).toEqual(NOTHING);
    expect(args).toEqual(['run', '--rm']);
    expect(forced.warnings).toEqual([
      'not used, llxprt forwards the agent and the credential proxy itself: the plan runs the container with `podman --connection vm run`, a connection llxprt\'s podman would not choose by itself (set CONTAINER_CONNECTION=vm, or unset SANDBOXD_SSH_BRIDGE)',
    ]);
  });

  it('LLXPRT_SANDBOX_SSH_AGENT=off: no agent from either side; git and the credential proxy still come', async () => {
    const offEnv = { ...env, LLXPRT_SANDBOX_SSH_AGENT: 'off' };
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: false, proxySocket: proxy.socket, env: offEnv, options: { log: recordingLog() } });
    expect(launch.forwarded).toBe(false);
    expect(envValues(launch.args, 'SSH_AUTH_SOCK')).toEqual([]);
    expect(launch.credentialSocket).toBe(CREDENTIAL_IN_CONTAINER);
    const result = await runLlxprtContainer(launch, image, 'echo "agent=${SSH_AUTH_SOCK:-none}"; git config user.email', offEnv);
    expect(result.stdout.split('\n')).toEqual(['agent=none', 'host@example.com']);
  });

  it('a credential socket that is not there: llxprt\'s own value stands, the agent is still sandboxd\'s, and the user is not told', async () => {
    const log = recordingLog();
    const gone = path.join(sandbox.dir, 'gone.sock');
    const launch = await llxprtLaunch({ home: sandbox.home, cwd: project, image, setUidGid: false, proxySocket: gone, env, options: { log } });
    expect(launch.forwarded).toBe(true);
    expect(launch.credentialSocket).toBe(gone);
    expect(log.debugLines).toContain(`the credential proxy is left to llxprt: sandboxd does not carry it: socket credential-proxy ${gone} does not exist`);
    // llxprt carries it itself: the plan's warning about the socket is no news to its user.
    expect(log.warnings).toEqual([]);
    expect(log.debugLines).toEqual(expect.arrayContaining(OVERRIDE_NOTICES));
    expect(envValues(launch.args, 'SSH_AUTH_SOCK')).toEqual(['/run/sandboxd/ssh/agent.sock']);
    expect((await sessionsOf(env)).filter((session) => session.label === 'llxprt')).toHaveLength(1);
  });

  it('a credential proxy that does not start: the session carries the agent, and llxprt\'s own step meets the failure', async () => {
    const log = recordingLog();
    const args = ['run', '--rm', '--volume', `${project}:${project}`];
    const forwarded = await forwardThroughSandboxd({ command: 'podman' }, args, {
      env,
      cwd: project,
      log,
      credentialSocket: () => Promise.reject(new Error('EADDRINUSE')),
    });
    perTest.add(() => releaseSandboxd(args));
    expect(forwarded).toEqual({ sshAgent: true, credentialSocket: undefined });
    expect(log.debugLines).toContain('the credential proxy is left to llxprt: it did not start: EADDRINUSE');
    expect(log.warnings).toEqual([]);
    expect(log.debugLines).toEqual(expect.arrayContaining(OVERRIDE_NOTICES));
  });

  it('a Podman connection that does not exist: llxprt\'s own path runs, and the user is told why', async () => {
    const log = recordingLog();
    const args = ['run', '--rm', '--volume', `${project}:${project}`];
    const forwarded = await forwardThroughSandboxd({ command: 'podman' }, args, { env: { ...env, CONTAINER_CONNECTION: 'no-such-machine' }, cwd: project, log, credentialSocket: proxy.socket });
    expect(forwarded).toEqual(NOTHING);
    expect(args).toEqual(['run', '--rm', '--volume', `${project}:${project}`]);
    expect(log.warnings).toHaveLength(1);
    expect(log.warnings[0]).toMatch(/^not used, llxprt forwards the agent and the credential proxy itself: .*no-such-machine.* \(List them with `podman system connection list`\.\)$/);
  });

  it('llxprt exits without a word: the daemon ends its session', async () => {
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { forwardThroughSandboxd } = await import(${JSON.stringify(ADAPTER)});
         const forwarded = await forwardThroughSandboxd({ command: 'podman' }, ['run', '--rm'], { cwd: ${JSON.stringify(project)} });
         console.log(forwarded.sshAgent ? 'forwarded' : 'not forwarded');
         process.stdin.once('data', () => process.exit(0));`,
      ],
      { env, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    perTest.add(() => child.kill('SIGKILL'));
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    await waitFor(() => stdout.includes('forwarded'), 'the child to take a session');
    expect(stdout.trim()).toBe('forwarded');
    const pid = child.pid ?? 0;
    expect((await sessionsOf(env)).map((session) => session.clientPid)).toContain(pid);
    child.stdin.write('exit\n');
    await waitFor(async () => !(await sessionsOf(env)).some((session) => session.clientPid === pid), 'the daemon to end the exited client\'s session');
  });
});

describe('what a launch loads', () => {
  /**
   * A program that imports the adapter and runs llxprt's launch step, noting what it loaded and
   * how it connected: zod marks globalThis when it loads, Node lists the builtins it loaded, and
   * both ways to connect are counted. Structure, not timing: the figures are the bench's (rows 10).
   */
  const PROBE = `
    const loaded = () => ({ zod: '__zod_globalConfig' in globalThis, childProcess: process.moduleLoadList?.includes('NativeModule child_process') ?? false });
    const connects = { bun: 0, net: 0 };
    const bun = globalThis.Bun;
    if (bun !== undefined) {
      const own = bun.connect;
      bun.connect = (...args) => { connects.bun += 1; return own.apply(bun, args); };
    }
    const net = await import('node:net');
    const netConnect = net.Socket.prototype.connect;
    net.Socket.prototype.connect = function (...args) { connects.net += 1; return netConnect.apply(this, args); };
    const { forwardThroughSandboxd } = await import(${JSON.stringify(ADAPTER)});
    const afterImport = loaded();
    const args = ['run', '--rm'];
    const forwarded = await forwardThroughSandboxd({ command: 'podman' }, args, { cwd: process.cwd(), log: { warn: (line) => console.error(line), debug: () => undefined } });
    console.log(JSON.stringify({ afterImport, atEnd: loaded(), merged: args.length > 2, forwarded: forwarded.sshAgent, connects }));
  `;

  it.each([
    ['Node', process.execPath, { bun: 0, net: 1 }],
    ['Bun', path.join(import.meta.dirname, '../../node_modules/.bin/bun'), { bun: 1, net: 0 }],
  ])('%s: a launch against a running daemon loads neither zod nor child_process, and connects once, on the runtime\'s own socket', async (_runtime, binary, connects) => {
    const sandbox = makeSandbox(perTest);
    const agent = await startAgent(sandbox.dir, perTest);
    const env = cliEnv(sandbox, { SSH_AUTH_SOCK: agent.socket });
    await startDaemon(env, perTest);
    writeFileSync(path.join(sandbox.dir, 'probe.mjs'), PROBE);
    const result = await execa(binary, [path.join(sandbox.dir, 'probe.mjs')], { cwd: sandbox.dir, env, extendEnv: false, reject: false, timeout: 45_000 });
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({
      afterImport: { zod: false, childProcess: false },
      atEnd: { zod: false, childProcess: false },
      merged: true,
      forwarded: true,
      connects,
    });
  });
});

describe('the adapter\'s entry', () => {
  it('is one file: importing it reads no other module, and its namespace holds its public names alone', async () => {
    // esbuild follows the built entry's imports as Node and Bun would: none may be static.
    const { metafile } = await build({ entryPoints: [ADAPTER], bundle: true, splitting: true, format: 'esm', platform: 'node', write: false, metafile: true, outdir: path.join(path.dirname(ADAPTER), 'unwritten'), logLevel: 'silent' });
    const [, entry] = Object.entries(metafile.inputs).find(([file]) => path.resolve(file) === ADAPTER) ?? [];
    expect(entry?.imports.filter((imported) => imported.kind !== 'dynamic-import')).toEqual([]);
    expect(entry?.imports.length).toBeGreaterThan(0);
    const names = Object.keys((await import(ADAPTER)) as object);
    expect(names.sort()).toEqual(['CONNECTION_NOT_CARRIED', 'CREDENTIAL_SOCKET_NAME', 'NOT_A_CONTAINER', 'OPTED_OUT', 'forwardThroughSandboxd', 'releaseSandboxd']);
  });
});

describe('the adapter: when llxprt\'s own path runs', () => {
  const args = () => ['run', '--rm', '--volume', '/tmp:/tmp'];

  /** llxprt's credential proxy as the patch hands it over: started only when sandboxd is asked. */
  const proxyStarter = () => {
    const starts: string[] = [];
    return { starts, start: () => Promise.resolve(`/tmp/proxy-${String(starts.push('started'))}.sock`) };
  };

  it('LLXPRT_SANDBOXD=0 opts out without touching the daemon or starting the proxy, at debug level', async () => {
    const sandbox = makeSandbox(perTest);
    const log = recordingLog();
    const launch = args();
    const proxy = proxyStarter();
    expect(await forwardThroughSandboxd({ command: 'podman' }, launch, { env: cliEnv(sandbox, { LLXPRT_SANDBOXD: '0' }), cwd: sandbox.dir, log, credentialSocket: proxy.start })).toEqual(NOTHING);
    expect(launch).toEqual(args());
    expect(proxy.starts).toEqual([]);
    expect(log).toMatchObject({ warnings: [], debugLines: ['not used, llxprt forwards the agent and the credential proxy itself: LLXPRT_SANDBOXD is 0'] });
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('sandbox-exec is not a container engine: left to llxprt, at debug level', async () => {
    const log = recordingLog();
    const proxy = proxyStarter();
    expect(await forwardThroughSandboxd({ command: 'sandbox-exec' }, args(), { log, credentialSocket: proxy.start })).toEqual(NOTHING);
    expect(proxy.starts).toEqual([]);
    expect(log).toMatchObject({ warnings: [], debugLines: ['not used, llxprt forwards the agent and the credential proxy itself: llxprt\'s sandbox runs with sandbox-exec, not a container engine'] });
  });

  it('not running with auto-start off: DAEMON_NOT_RUNNING, at debug level', async () => {
    const sandbox = makeSandbox(perTest);
    const log = recordingLog();
    expect(await forwardThroughSandboxd({ command: 'podman' }, args(), { env: cliEnv(sandbox, { SANDBOXD_NO_AUTOSTART: '1' }), cwd: sandbox.dir, log })).toEqual(NOTHING);
    expect(log.warnings).toEqual([]);
    expect(log.debugLines[0]).toMatch(/^not used, llxprt forwards the agent and the credential proxy itself: sandboxd is not running/);
  });

  it('not installed where it is looked for: the user sees where it looked', async () => {
    const sandbox = makeSandbox(perTest);
    const log = recordingLog();
    const missing = path.join(sandbox.dir, 'no-sandboxd');
    expect(await forwardThroughSandboxd({ command: 'podman' }, args(), { env: cliEnv(sandbox, { SANDBOXD_BIN: missing }), cwd: sandbox.dir, log })).toEqual(NOTHING);
    expect(log.warnings).toEqual([
      `not used, llxprt forwards the agent and the credential proxy itself: SANDBOXD_BIN is ${missing}, which is not an executable file (Set SANDBOXD_BIN to the path of the \`sandboxd\` executable, or unset it.)`,
    ]);
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('a daemon of another protocol version: PROTOCOL_MISMATCH, shown', async () => {
    const sandbox = makeSandbox(perTest);
    const rt = sandbox.env.SANDBOXD_RUNTIME_DIR;
    mkdirSync(rt, { recursive: true, mode: 0o700 });
    // Stands in for a newer sandboxd still running after llxprt's bundled client was downgraded.
    const server = http.createServer((_req, res) => {
      res.setHeader('sandboxd-protocol', '99');
      res.setHeader('content-type', 'application/json');
      res.statusCode = 409;
      res.end(JSON.stringify({ error: { code: 'PROTOCOL_MISMATCH', message: 'this daemon serves protocols 98 and 99', remedy: 'x' } }));
    });
    await new Promise<void>((resolve) => server.listen(path.join(rt, 'sandboxd.sock'), resolve));
    perTest.add(() => new Promise((resolve) => server.close(resolve)));
    const log = recordingLog();
    expect(await forwardThroughSandboxd({ command: 'podman' }, args(), { env: cliEnv(sandbox), cwd: sandbox.dir, log })).toEqual(NOTHING);
    expect(log.warnings).toHaveLength(1);
    // The client first tries to replace an older idle daemon; this one answers with its own error.
    expect(log.warnings).toEqual(['not used, llxprt forwards the agent and the credential proxy itself: this daemon serves protocols 98 and 99 (x)']);
  });

  it('llxprt arguments it cannot read (SANDBOX_FLAGS): RUN_ARGS_UNPARSABLE, the arguments untouched and the session given back', async () => {
    const sandbox = makeSandbox(perTest);
    const env = cliEnv(sandbox, { SSH_AUTH_SOCK: '' });
    await startDaemon(env, perTest);
    const log = recordingLog();
    const launch = ['run', '--brand-new-flag', 'x', '--rm'];
    expect(await forwardThroughSandboxd({ command: 'podman' }, launch, { env, cwd: sandbox.dir, log })).toEqual(NOTHING);
    expect(launch).toEqual(['run', '--brand-new-flag', 'x', '--rm']);
    expect(log.warnings[0]).toMatch(/^not used, llxprt forwards the agent and the credential proxy itself: unknown run option --brand-new-flag/);
    expect(await sessionsOf(env)).toEqual([]);
  });
});
