import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { CLI, Cleanup, ROOT, cli, cliEnv, exitOf, makeSandbox, pidAlive, startAgent, startDaemon, waitFor, type Sandbox } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const hasActivate = spawnSync('systemd-socket-activate', ['--version']).status === 0;

interface ServiceLab {
  sandbox: Sandbox;
  env: NodeJS.ProcessEnv;
  unitDir: string;
  calls: () => string[];
}

/** A temp HOME and XDG_CONFIG_HOME, and a systemctl stand-in first on PATH that records its argv. */
function serviceLab(): ServiceLab {
  const sandbox = makeSandbox(cleanup);
  const bin = path.join(sandbox.dir, 'bin');
  const config = path.join(sandbox.dir, 'config');
  const callsFile = path.join(sandbox.dir, 'systemctl.calls');
  mkdirSync(bin);
  // Stands in for `systemctl --user`: records each call and succeeds, so nothing of the host's
  // systemd is touched.
  writeFileSync(path.join(bin, 'systemctl'), `#!/bin/sh\necho "$*" >> ${callsFile}\nexit 0\n`);
  chmodSync(path.join(bin, 'systemctl'), 0o755);
  const env = cliEnv(sandbox, { XDG_CONFIG_HOME: config, PATH: `${bin}:${process.env.PATH ?? ''}` });
  return {
    sandbox,
    env,
    unitDir: path.join(config, 'systemd', 'user'),
    calls: () => (existsSync(callsFile) ? readFileSync(callsFile, 'utf8').trim().split('\n') : []),
  };
}

/** The unit's ExecStart and Environment lines, unquoted (the renderer quotes only what needs it). */
function unitCommand(service: string): { argv: string[]; env: Record<string, string> } {
  const exec = /^ExecStart=(.+)$/m.exec(service)?.[1] ?? '';
  const argv = (exec.match(/"[^"]*"|\S+/g) ?? []).map((word) => word.replace(/^"|"$/g, ''));
  const env: Record<string, string> = {};
  for (const match of service.matchAll(/^Environment="([^=]+)=(.*)"$/gm)) env[match[1] ?? ''] = match[2] ?? '';
  return { argv, env };
}

describe('sandboxd install / uninstall on Linux (systemd user units)', () => {
  it('--dry-run prints the units and commands and changes nothing', async () => {
    const { env, unitDir, calls } = serviceLab();
    const result = await cli(['install', '--dry-run'], env);
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stdout).toContain(`write ${unitDir}/sandboxd.service`);
    expect(result.stdout).toContain('    ListenStream=');
    expect(result.stdout).toContain('run systemctl --user enable --now sandboxd.socket');
    expect(existsSync(unitDir)).toBe(false);
    expect(calls()).toEqual([]);
    const json = JSON.parse((await cli(['install', '--dry-run', '--json'], env)).stdout) as { manager: string; dryRun: boolean; steps: { kind: string }[] };
    expect(json).toMatchObject({ manager: 'systemd', dryRun: true });
    expect(json.steps.map((step) => step.kind)).toEqual(['write', 'write', 'run', 'run']);
  });

  it('writes both units, reloads and enables the socket; re-running is safe; uninstall reverses it', async () => {
    const { env, unitDir, calls } = serviceLab();
    for (let round = 0; round < 2; round += 1) {
      const result = await cli(['install'], env);
      expect(result.exitCode, result.stderr).toBe(0);
      expect(result.stdout).toContain('sandboxd installed (systemd');
    }
    // One after another: the manager must answer, and reload the units before the socket is enabled.
    const install = ['--user show-environment', '--user daemon-reload', '--user enable --now sandboxd.socket'];
    expect(calls()).toEqual([...install, ...install]);
    const service = readFileSync(path.join(unitDir, 'sandboxd.service'), 'utf8');
    const { argv, env: unitEnv } = unitCommand(service);
    expect(argv.slice(0, 2).every((word) => path.isAbsolute(word))).toBe(true);
    expect(argv.slice(2)).toEqual(['daemon', '--service-manager', 'systemd']);
    expect(unitEnv.SANDBOXD_RUNTIME_DIR).toBe(env.SANDBOXD_RUNTIME_DIR);
    expect(readFileSync(path.join(unitDir, 'sandboxd.socket'), 'utf8')).toContain(`ListenStream=${env.SANDBOXD_RUNTIME_DIR ?? ''}/sandboxd.sock`);

    const doctor = JSON.parse((await cli(['doctor', '--json'], env)).stdout) as { checks: { name: string; state: string }[] };
    expect(doctor.checks.find((check) => check.name === 'login service')).toMatchObject({ state: 'ok' });

    const removed = await cli(['uninstall'], env);
    expect(removed.exitCode, removed.stderr).toBe(0);
    expect(existsSync(path.join(unitDir, 'sandboxd.service'))).toBe(false);
    expect(existsSync(path.join(unitDir, 'sandboxd.socket'))).toBe(false);
    // doctor asks whether the manager answers, then asks two things at once (in either order).
    const [reachable, ...doctorAsked] = calls().slice(6, 9);
    expect(reachable).toBe('--user show-environment');
    expect(doctorAsked.sort()).toEqual(['--user is-enabled --quiet sandboxd.socket', '--user show sandboxd.service --property=ActiveState,ExecMainStatus,Result']);
    // uninstall stops the socket before the service it would start again, and reloads last.
    expect(calls().slice(9)).toEqual(['--user disable --now sandboxd.socket', '--user stop sandboxd.service', '--user daemon-reload']);
    expect((await cli(['uninstall'], env)).stdout.split('\n')).toEqual([
      'sandboxd was not installed as a service',
      'no daemon was running',
      'clients start the daemon themselves again; to remove sandboxd: `sandboxd uninstall --purge`, then `npm uninstall -g sandboxd`',
    ]);
  });

  it('names the node the PATH gives (a link an upgrade repoints), not its realpath into a version directory', async () => {
    const { sandbox, env, unitDir } = serviceLab();
    // Stands in for /opt/homebrew/bin/node -> ../Cellar/node/<version>/bin/node.
    const linkDir = path.join(sandbox.dir, 'homebrew-bin');
    mkdirSync(linkDir);
    symlinkSync(process.execPath, path.join(linkDir, 'node'));
    const result = await execa(path.join(linkDir, 'node'), [CLI, 'install'], { env: { ...env, PATH: `${linkDir}:${env.PATH ?? ''}` }, extendEnv: false, reject: false });
    expect(result.exitCode, result.stderr).toBe(0);
    const { argv } = unitCommand(readFileSync(path.join(unitDir, 'sandboxd.service'), 'utf8'));
    expect(argv[0]).toBe(path.join(linkDir, 'node'));
  });

  it('refuses a newline in a value it would render, before it changes anything', async () => {
    const { env, unitDir, calls } = serviceLab();
    const injected = `${env.SANDBOXD_RUNTIME_DIR ?? ''}\nExecStartPre=/bin/touch /tmp/sbx-pwned`;
    const result = await cli(['install', '--json'], { ...env, SANDBOXD_RUNTIME_DIR: injected });
    expect(result.exitCode).toBe(1);
    expect((JSON.parse(result.stdout) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'SERVICE_VALUE_UNSUPPORTED',
      message: expect.stringContaining('contains a control character (U+000A)') as string,
    });
    expect(existsSync(unitDir)).toBe(false);
    expect(calls()).toEqual([]);
  });

  it('a service whose program is gone (node upgraded): clients start the daemon themselves and say why; doctor names it', async () => {
    const { env, unitDir, calls } = serviceLab();
    expect((await cli(['install'], env)).exitCode).toBe(0);
    const unit = path.join(unitDir, 'sandboxd.service');
    const gone = '/opt/homebrew/Cellar/node/20.0.0/bin/node';
    const { argv } = unitCommand(readFileSync(unit, 'utf8'));
    writeFileSync(unit, readFileSync(unit, 'utf8').replace(`ExecStart=${argv[0] ?? ''}`, `ExecStart=${gone}`));
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 30_000);
    expect(plan.exitCode, plan.stdout).toBe(0);
    expect(plan.stderr).toBe(`sandboxd: the service's program ${gone} is missing; starting the daemon without systemd (run \`sandboxd install\` again to fix the service)`);
    // The stand-in systemctl was never asked to start a service that cannot run.
    expect(calls().filter((call) => call.includes('start'))).toEqual([]);
    const doctor = JSON.parse((await cli(['doctor', '--json'], env, 45_000)).stdout) as { checks: { name: string; state: string; detail: string; remedy: string }[] };
    expect(doctor.checks.find((check) => check.name === 'login service')).toMatchObject({
      state: 'fail',
      detail: expect.stringContaining(`the service's program ${gone} is missing`) as string,
      remedy: expect.stringContaining('Run `sandboxd install` again') as string,
    });
  });

  it('uninstall leaves no unit, socket or daemon behind', async () => {
    const { env, unitDir } = serviceLab();
    expect((await cli(['install'], env)).exitCode).toBe(0);
    // The daemon the service (or a client) started, still running when the user uninstalls.
    const daemon = await startDaemon(env, cleanup, ['--service-manager', 'systemd']);
    const socket = path.join(env.SANDBOXD_RUNTIME_DIR ?? '', 'sandboxd.sock');
    expect(existsSync(socket)).toBe(true);
    const removed = await cli(['uninstall'], env);
    expect({ code: removed.exitCode, stderr: removed.stderr }).toEqual({ code: 0, stderr: '' });
    await exitOf(daemon.child, 10_000);
    expect(readdirSync(unitDir)).toEqual([]);
    expect(existsSync(socket)).toBe(false);
  });

  it('refuses to install over a daemon with open sessions (DAEMON_ALREADY_RUNNING)', async () => {
    const { env } = serviceLab();
    const agent = await startAgent(path.join(env.SANDBOXD_STATE_DIR ?? '', '..'), cleanup);
    const holder = spawn(process.execPath, ['-e', `
      const { acquireSession } = await import(${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))});
      await acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: true });
      console.log('held');
      setInterval(() => {}, 1000);
    `, '--input-type=module'], { env: { ...env, SSH_AUTH_SOCK: agent.socket }, stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => holder.kill('SIGKILL'));
    let out = '';
    holder.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('held'), 'a session to be held', 30_000);
    const result = await cli(['install', '--json'], env);
    expect(result.exitCode).toBe(1);
    expect(JSON.parse(result.stdout)).toEqual({
      error: {
        code: 'DAEMON_ALREADY_RUNNING',
        message: 'a daemon with 1 open session is running; installing would stop it',
        remedy: 'Run `sandboxd install` again once they end, or `sandboxd stop` first (their containers\' agent stops answering until the service\'s daemon runs).',
      },
    });
  });

  it.skipIf(!hasActivate && process.env.CI === undefined)('socket activation: the installed unit\'s command serves the socket systemd-socket-activate hands it; stop goes through systemctl', async () => {
    const { sandbox, env, unitDir, calls } = serviceLab();
    expect((await cli(['install'], env)).exitCode).toBe(0);
    const { argv, env: unitEnv } = unitCommand(readFileSync(path.join(unitDir, 'sandboxd.service'), 'utf8'));
    const socket = path.join(env.SANDBOXD_RUNTIME_DIR ?? '', 'sandboxd.sock');
    mkdirSync(path.dirname(socket), { mode: 0o700 });
    // What systemd does with sandboxd.socket: listen, and start the service on the first connection.
    const activator = spawn('systemd-socket-activate', ['-l', socket, ...Object.keys(unitEnv).flatMap((name) => ['-E', `${name}=${unitEnv[name] ?? ''}`]), '-E', `HOME=${sandbox.home}`, ...argv], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    cleanup.add(() => activator.kill('SIGKILL'));
    let stderr = '';
    activator.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor(() => stderr.includes('Listening on'), 'systemd-socket-activate to listen');

    // The first connection starts the daemon; under an installed service its cold start is waited out.
    const status = await cli(['status', '--json'], { ...env, SANDBOXD_NO_AUTOSTART: '1' });
    expect(status.exitCode, status.stderr).toBe(0);
    const body = JSON.parse(status.stdout) as { pid: number; socketPath: string };
    expect(body.pid).toBe(activator.pid);
    expect(body.socketPath).toBe(socket);

    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env);
    expect(plan.exitCode, plan.stderr).toBe(0);
    expect(stderr).toContain('listening on');
    expect(readFileSync(path.join(env.SANDBOXD_LOG_DIR ?? '', 'sandboxd.log'), 'utf8')).toContain('"socketActivated":true');

    // The stand-in systemctl stops nothing: `stop` asks it first, then falls back to the socket.
    const stop = await cli(['stop'], env);
    expect(stop.exitCode, stop.stderr).toBe(0);
    expect(calls()).toContain('--user stop sandboxd.service');
    await exitOf(activator, 10_000);
    expect(pidAlive(body.pid)).toBe(false);
    // The socket is systemd's: the daemon leaves it for the next activation.
    expect(existsSync(socket)).toBe(true);
  });
});
