import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { listSessions } from '../../dist/client/index.js';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { CLI, Cleanup, cli, cliEnv, exitOf, makeSandbox, startAgent, startDaemon, waitFor } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

describe('the CLI behaves like the CLIs people know (built CLI)', () => {
  it('usage errors: one line plus a hint, exit 2; JSON with --json; the option given is named', async () => {
    const env = cliEnv(makeSandbox(cleanup));
    const missing = await cli(['plan', '--ssh-agent'], env);
    expect({ code: missing.exitCode, stderr: missing.stderr, stdout: missing.stdout }).toEqual({
      code: 2,
      stderr: "sandboxd: option '--ssh-agent <setting>' argument missing\n  see 'sandboxd plan --help'",
      stdout: '',
    });
    const choice = await cli(['plan', '--engine', 'lxc', '--json'], env);
    expect(choice.exitCode).toBe(2);
    expect(JSON.parse(choice.stdout)).toEqual({
      error: { code: 'USAGE', message: "option '--engine <engine>' argument 'lxc' is invalid. Allowed choices are docker, podman.", remedy: 'See `sandboxd plan --help`.' },
    });
    const unknown = await cli(['tunnels', 'lss'], env);
    expect({ code: unknown.exitCode, stderr: unknown.stderr }).toEqual({ code: 2, stderr: "sandboxd: unknown command 'lss' (Did you mean ls?)\n  see 'sandboxd tunnels --help'" });
    const log = await cli(['daemon', '--log', 'syslog'], env);
    expect(log.exitCode).toBe(2);
    expect(log.stderr).toContain("argument 'syslog' is invalid. Allowed choices are file, stdout.");
    const idle = await cli(['daemon'], { ...env, SANDBOXD_TUNNEL_IDLE: 'soon' });
    expect({ code: idle.exitCode, stderr: idle.stderr }).toEqual({ code: 2, stderr: 'sandboxd: SANDBOXD_TUNNEL_IDLE must be a number of seconds, got "soon"\n  Give SANDBOXD_TUNNEL_IDLE a number of seconds, e.g. 60.' });
    const since = await cli(['logs', '--since', 'yesterday'], env);
    expect(since.exitCode).toBe(2);
    expect(since.stderr).toContain('--since must be a duration like 90s, 10m, 2h or 1d, got "yesterday"');
  });

  it('a plan whose reader is gone exits quietly and still releases its session', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    await startDaemon(env, cleanup);
    const child = spawn(process.execPath, [CLI, 'plan', '--engine', 'podman', '--ssh-agent', 'off'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    // `| head -0`: the reader closes before the plan is written.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const { code } = await exitOf(child, 30_000);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(await listSessions(env)).toEqual([]);
  });

  it('version, logs and status agree on one daemon; start --json has the shape of status --json', async () => {
    const env = cliEnv(makeSandbox(cleanup));
    const started = JSON.parse((await cli(['start', '--json'], env)).stdout) as Record<string, unknown>;
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as Record<string, unknown>;
    expect(Object.keys(started).sort()).toEqual(Object.keys(status).sort());
    expect(started).toMatchObject({ running: true, pid: status.pid });
    const version = JSON.parse((await cli(['version', '--json'], env)).stdout) as { client: { version: string; protocol: number }; daemon: { pid: number; protocol: number } };
    expect(version.daemon).toMatchObject({ pid: status.pid, protocol: version.client.protocol });
    const logs = await waitFor(async () => {
      const result = await cli(['logs'], env);
      return result.stdout.includes('listening') ? result : null;
    }, 'the daemon to log');
    expect(logs.stdout).toMatch(/^\S+Z INFO {2}- +listening {2}socket=\S+ version=\S+ socketActivated=false phases=\{"runtime":[\d.]+,.*\} startupMs=\d+ startupCpuMs=\d+ codeCache=\S+$/m);
    const stopped = await cli(['stop'], env);
    expect(stopped.stdout).toBe('sandboxd stopped');
    expect((await cli(['version'], env)).stdout).toMatch(/^client: \S+ \(protocol \d+\)\ndaemon: not running$/);
  });

  it('stop with open sessions says how many and what they lose', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    await startDaemon(env, cleanup);
    const holder = spawn(process.execPath, ['--input-type=module', '-e', `
      const { acquireSession } = await import(${JSON.stringify(new URL('../../dist/client/index.js', import.meta.url).pathname)});
      await acquireSession({ engine: 'podman', sshAgent: 'off' });
      console.log('held');
      setInterval(() => {}, 1000);
    `], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => holder.kill('SIGKILL'));
    let out = '';
    holder.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('held'), 'a session to be held', 30_000);
    const stopped = await cli(['stop'], env);
    expect(stopped.exitCode).toBe(0);
    expect(stopped.stderr).toBe("sandboxd: stopping with 1 open session: their containers' SSH agent and extra sockets stop answering until a daemon runs again, which serves the same sockets; live clients renew their lease (containers are not removed)");
  });

  it('bare `sandboxd` prints the help on stdout and exits 0, as docker and podman do', async () => {
    const result = await cli([], cliEnv(makeSandbox(cleanup)));
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    expect(result.stdout).toMatch(/^Usage: sandboxd \[options\] \[command\]/);
    expect(result.stdout).toContain('completion');
  });

  it("the daemon's own refusal of a malformed id reads as words, with a remedy that is not about schemas", async () => {
    const env = cliEnv(makeSandbox(cleanup));
    await startDaemon(env, cleanup);
    for (const args of [['sessions', 'rm', 'nope'], ['tunnels', 'restart', 'nope']]) {
      const result = await cli(args, env);
      expect(result.exitCode).toBe(1);
      expect(result.stderr).toBe(`sandboxd: the ${args[0] === 'sessions' ? 'session' : 'tunnel'} id "nope" is not in the form sandboxd expects\n  Correct the value it names; \`sandboxd sessions ls\` and \`sandboxd tunnels ls\` list the ids in use.`);
    }
  });

  it('`sandboxd completion bash` completes commands, subcommands and option values in a real bash', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const script = path.join(sandbox.dir, 'sandboxd.bash');
    writeFileSync(script, (await cli(['completion', 'bash'], env)).stdout);
    // As bash calls it on TAB: the words so far in COMP_WORDS, the one being completed last.
    const complete = async (...words: string[]) => {
      const probe = `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sandboxd; echo "\${COMPREPLY[*]}"`;
      return (await execa('bash', ['-c', probe, 'bash', script, ...words])).stdout;
    };
    expect(await complete('sandboxd', 'ru')).toBe('run');
    expect(await complete('sandboxd', 'tunnels', '')).toBe('ls restart rm');
    expect(await complete('sandboxd', 'run', '--engine', '')).toBe('docker podman');
    expect(await complete('sandboxd', 'tunnels', 'ls', '--no-t')).toBe('--no-trunc');
    expect(await complete('sandboxd', 'completion', '')).toBe('bash zsh fish');
    for (const shell of ['zsh', 'fish']) {
      const other = await cli(['completion', shell], env);
      expect({ code: other.exitCode, stderr: other.stderr }).toEqual({ code: 0, stderr: '' });
    }
  });

  it.skipIf(labMissing)('`tunnels ls` fits 100 columns; --no-trunc prints every path whole', async () => {
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const env = cliEnv(sandbox, { ...podmanLab().env, SSH_AUTH_SOCK: agent.socket });
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-bridge', 'mount', '--ssh-agent', 'on', '--no-workdir'], env, 60_000, sandbox.home);
    expect(plan.exitCode).toBe(0);
    const [relay] = JSON.parse((await cli(['tunnels', 'ls', '--json'], env)).stdout) as { id: string; socketPath: string }[];
    expect(relay).toBeDefined();
    const table = (await cli(['tunnels', 'ls'], env)).stdout.split('\n');
    expect(table.filter((line) => line.length > 100)).toEqual([]);
    expect(table[1]).toContain(relay?.id);
    // The directory of the sessions' directories, which tells the bridges apart, is never cut away.
    const sessionsDir = path.dirname(path.dirname(relay?.socketPath ?? ''));
    expect(relay?.socketPath).toBe(path.join(sessionsDir, '*', 'agent.sock'));
    expect(table[1]).toContain(`/${path.basename(sessionsDir)}`);
    const whole = (await cli(['tunnels', 'ls', '--no-trunc'], env)).stdout;
    expect(whole).toContain(sessionsDir);
    expect(Math.max(...whole.split('\n').map((line) => line.length))).toBeGreaterThan(100);
  });
});
