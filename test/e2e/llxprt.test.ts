import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { prepareLlxprtSandbox, type LlxprtSandbox } from '../../dist/client/llxprt/index.js';
import { Cleanup, cliEnv, daemonsFor, makeSandbox, startAgent, startDaemon, type Agent, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());
const perTest = new Cleanup();
afterEach(() => perTest.run());

const GIT_FILES = ['.gitconfig', '.config/git/config', '.gitignore_global', '.ssh/known_hosts'];

/** The `run` arguments llxprt builds for its own path, in its order (../shared/llxprt.md). */
function llxprtArgs(home: string, cwd: string, image: string, script: string): string[] {
  const tmp = os.tmpdir();
  return [
    'run', '-i', '--rm', '--init', '--workdir', cwd,
    '--cap-drop=ALL', '--security-opt', 'no-new-privileges',
    '--network', 'none',
    '--volume', `${cwd}:${cwd}`,
    '--volume', `${home}/.llxprt:${home}/.llxprt:z`,
    ...GIT_FILES.filter((file) => existsSync(path.join(home, file))).flatMap((file) => [
      '--volume', `${home}/${file}:${home}/${file}:ro`,
      '--volume', `${home}/${file}:/home/node/${file}:ro`,
    ]),
    '--volume', `${tmp}:${tmp}`,
    '--env', 'GIT_DISCOVERY_ACROSS_FILESYSTEM=1', '--env', 'TERM=xterm-256color', '--env', 'SANDBOX=llxprt-sandbox',
    '--user', '1000', '-e', 'HOME=/home/node',
    image, 'sh', '-c', script,
  ];
}

function used(result: LlxprtSandbox) {
  if (!result.used) throw new Error(`sandboxd was not used: ${result.code} ${result.reason}`);
  perTest.add(() => result.release());
  return result;
}

describe.skipIf(labMissing)('prepareLlxprtSandbox with llxprt\'s own arguments and the real podman', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let agent: Agent;
  let proxy: Agent;
  let project: string;

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    const { home } = sandbox;
    // llxprt mounts the whole tmpdir, and this host home lives in it: uid 1000 must traverse it, as
    // it can a real /home/<user>.
    chmodSync(sandbox.dir, 0o755);
    for (const dir of ['.llxprt', '.config/git', '.ssh']) mkdirSync(path.join(home, dir), { recursive: true });
    writeFileSync(path.join(home, '.gitconfig'), '[user]\n\tname = Host User\n\temail = host@example.com\n[safe]\n\tdirectory = *\n');
    writeFileSync(path.join(home, '.config/git/config'), '[core]\n\tautocrlf = false\n');
    writeFileSync(path.join(home, '.gitignore_global'), '*.secret\n');
    writeFileSync(path.join(home, '.ssh/known_hosts'), 'example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n');
    project = path.join(sandbox.dir, 'project');
    mkdirSync(project, { recursive: true });
    await execa('git', ['init', '-q', '-b', 'main'], { cwd: project });
    // Without SANDBOX_SET_UID_GID the container runs as llxprt's node user, uid 1000: it owns the tree.
    await execa('chown', ['-R', '1000:1000', project]);
    agent = await startAgent(sandbox.dir, cleanup);
    // Stands in for llxprt's credential proxy: another socket a uid-1000 container must reach.
    proxy = await startAgent(sandbox.dir, cleanup, 'proxy');
    chmodSync(proxy.socket, 0o600);
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket, LLXPRT_CREDENTIAL_SOCKET: proxy.socket });
    await startDaemon(env, cleanup);
  });

  function runEngine(prepared: { globalArgs: string[]; args: string[]; spawnEnv: Record<string, string> }) {
    return execa('podman', [...prepared.globalArgs, ...prepared.args], { env: { ...env, ...prepared.spawnEnv }, extendEnv: false, reject: false, timeout: 90_000, input: '' });
  }

  it('runs: no duplicate destination, the agent, the host identity, the credential proxy as uid 1000', async () => {
    const data = path.join(sandbox.dir, 'data');
    mkdirSync(data, { recursive: true });
    writeFileSync(path.join(data, 'in.txt'), 'custom mount\n');
    const script = [
      'echo "uid=$(id -u) home=$HOME"',
      'ssh-add -l',
      'echo "proxy at $LLXPRT_CREDENTIAL_SOCKET"',
      'SSH_AUTH_SOCK="$LLXPRT_CREDENTIAL_SOCKET" ssh-add -l',
      'git config user.email',
      'cat /data/in.txt',
    ].join('; ');
    const prepared = used(
      await prepareLlxprtSandbox({ engine: 'podman', args: llxprtArgs(sandbox.home, project, image, script), env: { ...env, LLXPRT_SANDBOX_MOUNTS: `${data}:/data` }, cwd: project }),
    );
    expect(prepared.sshForwarded).toBe(true);
    expect(prepared.skipped.filter((entry) => entry.kind === 'mount').map((entry) => entry.key)).toContain('/home/node/.gitconfig');
    const result = await runEngine(prepared);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe('uid=1000 home=/home/node');
    expect(lines[1]).toContain(agent.fingerprint);
    expect(lines[2]).toBe('proxy at /run/sandboxd/sockets/credential-proxy/agent.sock');
    expect(lines[3]).toContain(proxy.fingerprint);
    expect(lines.slice(4)).toEqual(['host@example.com', 'custom mount']);
  });

  it('SANDBOX_SET_UID_GID: the session is the host user\'s, whose HOME is the host home', async () => {
    const script = 'echo "uid=$(id -u)"; ssh-add -l; git config user.email';
    const args = ['run', '--rm', '--network', 'none', '--user', String(process.getuid?.() ?? 0), '-e', `HOME=${sandbox.home}`, image, 'sh', '-c', script];
    const prepared = used(await prepareLlxprtSandbox({ engine: 'podman', args, env: { ...env, SANDBOX_SET_UID_GID: 'true' }, cwd: project }));
    expect(prepared.args.join(' ')).not.toContain('/home/node');
    const result = await runEngine(prepared);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.stdout).toContain('host@example.com');
  });

  it('LLXPRT_SANDBOX_SSH_AGENT=off: no agent in the container; llxprt\'s own SSH_AUTH_SOCK is reported, not doubled', async () => {
    const off = used(await prepareLlxprtSandbox({ engine: 'podman', args: ['run', '--rm', image, 'true'], env: { ...env, LLXPRT_SANDBOX_SSH_AGENT: 'off' }, cwd: project }));
    expect(off.sshForwarded).toBe(false);
    expect(off.args).not.toContain('SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock');
    const own = used(await prepareLlxprtSandbox({ engine: 'podman', args: ['run', '--rm', '-e', 'SSH_AUTH_SOCK=/ssh-agent', image, 'true'], env, cwd: project }));
    expect(own.sshForwarded).toBe(false);
    expect(own.args.filter((arg) => arg.startsWith('SSH_AUTH_SOCK='))).toEqual(['SSH_AUTH_SOCK=/ssh-agent']);
    expect(own.warnings).toContain('llxprt\'s run arguments set SSH_AUTH_SOCK themselves, so sandboxd\'s forwarded socket is not used; leave llxprt\'s own forwarding to the fallback path');
  });

  it('a credential socket that is not there is a warning, and the launch goes on', async () => {
    const prepared = used(await prepareLlxprtSandbox({ engine: 'podman', args: ['run', '--rm', image, 'true'], env: { ...env, LLXPRT_CREDENTIAL_SOCKET: path.join(sandbox.dir, 'gone.sock') }, cwd: project }));
    expect(prepared.warnings).toContain(`socket credential-proxy is not forwarded: socket credential-proxy ${path.join(sandbox.dir, 'gone.sock')} does not exist`);
    expect(prepared.args.some((arg) => arg.startsWith('LLXPRT_CREDENTIAL_SOCKET='))).toBe(false);
  });

  it('fails the launch, with the remedy, when the Podman connection it needs does not exist', async () => {
    const error = await prepareLlxprtSandbox({ engine: 'podman', args: ['run', image], env: { ...env, CONTAINER_CONNECTION: 'no-such-machine' }, cwd: project }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'PODMAN_CONNECTION_NOT_FOUND' });
  });
});

describe('prepareLlxprtSandbox: when llxprt falls back to its own path', () => {
  const args = ['run', '--rm', 'img', 'true'];

  it('LLXPRT_SANDBOXD=0 opts out without touching the daemon', async () => {
    const sandbox = makeSandbox(perTest);
    const result = await prepareLlxprtSandbox({ engine: 'podman', args, env: cliEnv(sandbox, { LLXPRT_SANDBOXD: '0' }), cwd: sandbox.dir });
    expect(result).toEqual({ used: false, code: 'OPTED_OUT', reason: 'LLXPRT_SANDBOXD=0: sandboxd is not used' });
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('not running with auto-start off: DAEMON_NOT_RUNNING', async () => {
    const sandbox = makeSandbox(perTest);
    const result = await prepareLlxprtSandbox({ engine: 'podman', args, env: cliEnv(sandbox, { SANDBOXD_NO_AUTOSTART: '1' }), cwd: sandbox.dir });
    expect(result).toMatchObject({ used: false, code: 'DAEMON_NOT_RUNNING' });
  });

  it('not installed where it is looked for: DAEMON_START_FAILED', async () => {
    const sandbox = makeSandbox(perTest);
    const result = await prepareLlxprtSandbox({ engine: 'podman', args, env: cliEnv(sandbox, { SANDBOXD_BIN: path.join(sandbox.dir, 'no-sandboxd') }), cwd: sandbox.dir });
    expect(result).toMatchObject({ used: false, code: 'DAEMON_START_FAILED' });
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('a daemon of another protocol version: PROTOCOL_MISMATCH', async () => {
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
    const result = await prepareLlxprtSandbox({ engine: 'podman', args, env: cliEnv(sandbox), cwd: sandbox.dir });
    expect(result).toMatchObject({ used: false, code: 'PROTOCOL_MISMATCH' });
  });

  it('llxprt arguments it cannot read: RUN_ARGS_UNPARSABLE, and the session is given back', async () => {
    const sandbox = makeSandbox(perTest);
    const env = cliEnv(sandbox, { SSH_AUTH_SOCK: '' });
    await startDaemon(env, perTest);
    const result = await prepareLlxprtSandbox({ engine: 'podman', args: ['run', '--brand-new-flag', 'x', 'img'], env, cwd: sandbox.dir });
    expect(result).toMatchObject({ used: false, code: 'RUN_ARGS_UNPARSABLE' });
    const sessions = await execa(process.execPath, [path.join(import.meta.dirname, '../../dist/bin/sandboxd.js'), 'sessions', 'ls', '--json'], { env, extendEnv: false });
    expect(JSON.parse(sessions.stdout)).toEqual([]);
  });
});
