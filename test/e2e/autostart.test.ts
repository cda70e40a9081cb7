import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, realpathSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { clientPaths, ensureDaemon } from '../../client/index.js';
import { checkReadable } from '../../client/daemon-calls.js';
import { createProcessProbe } from '../../daemon/os/process-identity.js';
import { CLI, Cleanup, cli, cliEnv, daemonsFor, makeSandbox, ROOT, startDaemon, waitFor, type Sandbox } from '../helpers.js';
import { daemonOfUnreapingParent, killToZombie, procState } from '../lab/unreaping-parent.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface JsonError {
  error: { code: string; message: string; remedy: string };
}

const OTHER_USER = 'sbxother';

/** A real second account (CI starts from a clean machine): created here if missing, removed after. */
function otherUser(): { uid: number; gid: number } {
  const id = (flag: string) => spawnSync('id', [flag, OTHER_USER], { encoding: 'utf8' });
  if (id('-u').status !== 0) {
    spawnSync('useradd', ['-M', OTHER_USER], { stdio: 'ignore' });
    cleanup.add(() => spawnSync('userdel', [OTHER_USER], { stdio: 'ignore' }));
  }
  return { uid: Number(id('-u').stdout.trim()), gid: Number(id('-g').stdout.trim()) };
}

function asUser(user: { uid: number; gid: number }, argv: string[]): [string, string[]] {
  return ['setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--clear-groups', ...argv]];
}

/** `<sandbox>/bin/<name>`: records its argv in `<name>.ran`, then runs the real CLI. */
function fakeSandboxd(sandbox: Sandbox, dir: string, name = 'sandboxd'): { file: string; ran: string } {
  const bin = path.join(sandbox.dir, dir);
  mkdirSync(bin, { recursive: true });
  const file = path.join(bin, name);
  const ran = path.join(sandbox.dir, `${dir}-${name}.ran`);
  writeFileSync(file, `#!/bin/sh\necho "$@" >> '${ran}'\nexec '${process.execPath}' '${CLI}' "$@"\n`);
  chmodSync(file, 0o755);
  return { file, ran };
}

function environOf(pid: number): Map<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter((entry) => entry !== '');
  return new Map(entries.map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]));
}

async function startedPid(sandbox: Sandbox, env: NodeJS.ProcessEnv): Promise<number> {
  const result = await cli(['start', '--json'], env);
  expect(result.stderr).toBe('');
  return (JSON.parse(result.stdout) as { pid: number }).pid;
}

describe('auto-start (real processes)', () => {
  it('20 clients starting at once leave exactly one daemon, and all of them get a plan', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const runs = await Promise.all(
      Array.from({ length: 20 }, () => cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 45_000)),
    );
    for (const run of runs) {
      expect(run.stderr).toBe('');
      expect(run.exitCode, run.stdout).toBe(0);
      expect((JSON.parse(run.stdout) as { plan: { env: Record<string, string> } }).plan.env.GIT_DISCOVERY_ACROSS_FILESYSTEM).toBe('1');
    }
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toHaveLength(1);
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { pid: number; counts: { sessions: number } };
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([status.pid]);
    expect(status.counts.sessions).toBe(0);
  });

  it('SANDBOXD_NO_AUTOSTART=1 turns auto-start off', async () => {
    const sandbox = makeSandbox(cleanup);
    const result = await cli(['plan', '--engine', 'docker', '--json'], cliEnv(sandbox, { SANDBOXD_NO_AUTOSTART: '1' }));
    expect(result.exitCode).toBe(3);
    const body = JSON.parse(result.stdout) as JsonError;
    expect(body.error.code).toBe('DAEMON_NOT_RUNNING');
    expect(body.error.message).toContain('auto-start is off');
    expect(body.error.remedy).toBe('Run `sandboxd start`.');
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('reports DAEMON_START_FAILED with the daemon\'s own error when it cannot start', async () => {
    const sandbox = makeSandbox(cleanup);
    // The client checks the state and runtime dirs it locks in; only the daemon opens the log dir.
    const logDir = sandbox.env.SANDBOXD_LOG_DIR;
    mkdirSync(logDir, { recursive: true });
    chmodSync(logDir, 0o777);
    const result = await cli(['plan', '--engine', 'podman'], cliEnv(sandbox));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(`sandboxd: the daemon (${process.execPath}) exited with code 1 while starting`);
    expect(result.stderr).toContain(`${logDir} has mode 0777`);
  });

  it('names both protocol versions and the fix when the daemon speaks another one', async () => {
    const sandbox = makeSandbox(cleanup);
    const rt = sandbox.env.SANDBOXD_RUNTIME_DIR;
    mkdirSync(rt, { recursive: true, mode: 0o700 });
    // Stands in for a sandboxd of another release still running after an upgrade.
    const server = http.createServer((_req, res) => {
      res.setHeader('sandboxd-protocol', '99');
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ version: '9.0.0', protocol: 99 }));
    });
    await new Promise<void>((resolve) => server.listen(path.join(rt, 'sandboxd.sock'), resolve));
    cleanup.add(() => new Promise((resolve) => server.close(resolve)));

    const result = await cli(['status', '--json'], cliEnv(sandbox));
    expect(result.exitCode).toBe(1);
    const body = JSON.parse(result.stdout) as JsonError;
    expect(body.error).toEqual({
      code: 'PROTOCOL_MISMATCH',
      message: `the daemon speaks protocol 99, this client speaks ${String(PROTOCOL_VERSION)}`,
      remedy: 'Run `sandboxd restart` to start the installed version.',
    });
    const plan = await cli(['plan', '--engine', 'podman'], cliEnv(sandbox));
    expect(plan.stderr).toContain(`sandboxd: the daemon speaks protocol 99, this client speaks ${String(PROTOCOL_VERSION)}`);
  });

  it('start is idempotent and reports the running daemon', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = JSON.parse((await cli(['start', '--json'], env)).stdout) as { pid: number };
    const second = JSON.parse((await cli(['start', '--json'], env)).stdout) as { pid: number };
    expect(second.pid).toBe(first.pid);
    await waitFor(() => daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR).length === 1, 'one daemon');
  });

  it('starts the daemon in / with a minimal environment, not the first client\'s cwd and settings', async () => {
    const sandbox = makeSandbox(cleanup);
    const cwd = path.join(sandbox.dir, 'project');
    const clientBin = path.join(sandbox.dir, 'client-bin');
    mkdirSync(cwd);
    mkdirSync(clientBin);
    const env = cliEnv(sandbox, { CONTAINERS_CONF: '/x', SBX_MARKER: 'leak', PATH: `${clientBin}:${process.env.PATH ?? ''}` });
    const plan = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], { env, extendEnv: false, cwd, reject: false, timeout: 30_000 });
    expect(plan.exitCode, plan.stdout).toBe(0);
    const [pid] = daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR);
    expect(pid).toBeDefined();
    expect(readlinkSync(`/proc/${String(pid)}/cwd`)).toBe('/');
    const environ = environOf(pid ?? 0);
    expect(environ.has('CONTAINERS_CONF')).toBe(false);
    expect(environ.has('SBX_MARKER')).toBe(false);
    expect(environ.get('SANDBOXD_RUNTIME_DIR')).toBe(sandbox.env.SANDBOXD_RUNTIME_DIR);
    expect(environ.get('HOME')).toBe(sandbox.home);
    expect(environ.get('PATH')?.split(':')).not.toContain(clientBin);
  });

  it('tells the daemon the app it was started from, which macOS privacy judges; the launchd service is judged as its own node', async () => {
    const sandbox = makeSandbox(cleanup);
    const node = realpathSync(process.execPath);
    // What a shell in Terminal running tmux carries (daemon/os/privacy.ts); there is no TCC here, only the wiring.
    const env = cliEnv(sandbox, { __CFBundleIdentifier: 'com.apple.Terminal', TERM_PROGRAM: 'tmux' });
    expect((await cli(['start'], env)).exitCode).toBe(0);
    expect((await checkReadable(sandbox.dir, env)).principal).toEqual({ binary: node, started: 'app', app: 'com.apple.Terminal' });
    expect((await cli(['stop'], env)).exitCode).toBe(0);
    await startDaemon(env, cleanup, ['--service-manager', 'launchd']);
    expect((await checkReadable(sandbox.dir, env)).principal).toEqual({ binary: node, started: 'launchd', app: null });
  });

  it('finds the daemon as `sandboxd` on PATH before its own package', async () => {
    const sandbox = makeSandbox(cleanup);
    const onPath = fakeSandboxd(sandbox, 'path-bin');
    const env = cliEnv(sandbox, { PATH: `${path.dirname(onPath.file)}:${process.env.PATH ?? ''}` });
    const pid = await startedPid(sandbox, env);
    expect(readFileSync(onPath.ran, 'utf8')).toBe('daemon\n');
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([pid]);
    // The daemon's own PATH keeps the command's directory, so a `#!/usr/bin/env node` script works.
    expect(environOf(pid).get('PATH')?.split(':')[0]).toBe(path.dirname(onPath.file));
  });

  it('prefers SANDBOXD_BIN to `sandboxd` on PATH', async () => {
    const sandbox = makeSandbox(cleanup);
    const onPath = fakeSandboxd(sandbox, 'path-bin');
    const named = fakeSandboxd(sandbox, 'opt', 'sandboxd-named');
    const env = cliEnv(sandbox, { SANDBOXD_BIN: named.file, PATH: `${path.dirname(onPath.file)}:${process.env.PATH ?? ''}` });
    await startedPid(sandbox, env);
    expect(readFileSync(named.ran, 'utf8')).toBe('daemon\n');
    expect(existsSync(onPath.ran)).toBe(false);
  });

  it('prefers the daemonCommand option to SANDBOXD_BIN and PATH (library)', async () => {
    const sandbox = makeSandbox(cleanup);
    const onPath = fakeSandboxd(sandbox, 'path-bin');
    const named = fakeSandboxd(sandbox, 'opt', 'sandboxd-named');
    const option = fakeSandboxd(sandbox, 'option', 'my-sandboxd');
    const env = cliEnv(sandbox, { SANDBOXD_BIN: named.file, PATH: `${path.dirname(onPath.file)}:${process.env.PATH ?? ''}` });
    const status = await ensureDaemon({ paths: clientPaths(env), env, autoStart: true, daemonCommand: [option.file] });
    expect(readFileSync(option.ran, 'utf8')).toBe('daemon\n');
    expect(existsSync(named.ran)).toBe(false);
    expect(existsSync(onPath.ran)).toBe(false);
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([status.pid]);
  });

  it('fails with DAEMON_START_FAILED naming SANDBOXD_BIN when it names no executable', async () => {
    const sandbox = makeSandbox(cleanup);
    const missing = path.join(sandbox.dir, 'nowhere', 'sandboxd');
    const result = await cli(['plan', '--engine', 'podman', '--json'], cliEnv(sandbox, { SANDBOXD_BIN: missing }));
    expect(result.exitCode).toBe(1);
    expect((JSON.parse(result.stdout) as JsonError).error).toEqual({
      code: 'DAEMON_START_FAILED',
      message: `SANDBOXD_BIN is ${missing}, which is not an executable file`,
      remedy: 'Set SANDBOXD_BIN to the path of the `sandboxd` executable, or unset it.',
    });
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });

  it('replaces a daemon killed with -9 at once, even while it is a zombie nobody reaps', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    // Auto-started by a long-lived library client that never reaps it: kill -9 leaves a zombie.
    const first = await daemonOfUnreapingParent(path.join(ROOT, 'dist/client/index.js'), env, cleanup);
    await killToZombie(first);
    // Still in the process table, and `kill(pid, 0)` still succeeds on it: what fooled the old check.
    expect(procState(first)).toBe('Z');
    expect(() => process.kill(first, 0)).not.toThrow();

    // Before the fix the next daemon saw the zombie as `already running` and the client waited 20 s.
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 10_000);
    expect(plan.stderr).toBe('');
    expect(plan.exitCode, plan.stdout).toBe(0);
    const [second] = daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR);
    expect(second).not.toBe(first);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    const takeover = log.split('\n').find((line) => line.includes('took over the lock of a daemon that is gone'));
    expect(JSON.parse(takeover ?? '{}')).toMatchObject({ deadPid: first });
  });

  it('starts a daemon again at once when the holder its first daemon deferred to dies', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const rt = sandbox.env.SANDBOXD_RUNTIME_DIR;
    const state = sandbox.env.SANDBOXD_STATE_DIR;
    mkdirSync(state, { recursive: true, mode: 0o700 });
    // A live holder that never answers on the socket: a daemon that is still starting, say.
    const holder = spawn('sleep', ['60'], { stdio: 'ignore' });
    cleanup.add(() => holder.kill('SIGKILL'));
    const holderPid = holder.pid ?? 0;
    const lock = path.join(state, 'daemon.lock');
    mkdirSync(lock);
    const keepFresh = setInterval(() => {
      const now = new Date();
      utimesSync(lock, now, now);
    }, 500);
    cleanup.add(() => {
      clearInterval(keepFresh);
    });
    writeFileSync(path.join(state, 'daemon.pid'), JSON.stringify({ pid: holderPid, startTime: await createProcessProbe('linux').startTime(holderPid) }));

    const plan = cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 15_000);
    const stderrFile = path.join(rt, 'daemon.stderr');
    await waitFor(() => existsSync(stderrFile) && readFileSync(stderrFile, 'utf8').includes(`already running (pid ${String(holderPid)})`), 'the first daemon to defer to the holder');
    clearInterval(keepFresh);
    holder.kill('SIGKILL');

    // Without noticing, the client would wait its full 20 s for the holder to answer.
    const result = await plan;
    expect(result.stderr).toBe('');
    expect(result.exitCode, result.stdout).toBe(0);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).toContain(`"deadPid":${String(holderPid)},"msg":"took over the lock of a daemon that is gone"`);
  });
});

describe('the socket directory is trusted only when it is the caller\'s', () => {
  it('refuses a runtime dir another user created and sends its fake daemon nothing, on status and on auto-start', async () => {
    const user = otherUser();
    const sandbox = makeSandbox(cleanup);
    // Stands in for /tmp: a directory where the other user may create entries.
    const shared = mkdtempSync('/tmp/sbx-shared-');
    cleanup.add(() => {
      rmSync(shared, { recursive: true, force: true });
    });
    chmodSync(shared, 0o755);
    chownSync(shared, user.uid, user.gid);
    const rt = path.join(shared, 'rt');
    const server = [
      'const net = require("node:net"); const fs = require("node:fs");',
      `fs.mkdirSync(${JSON.stringify(rt)}, { mode: 0o755 }); process.umask(0);`,
      'net.createServer((socket) => { console.log("connection"); socket.on("data", (d) => console.log(`data ${d.length}`)); })',
      `  .listen(${JSON.stringify(path.join(rt, 'sandboxd.sock'))}, () => console.log("ready"));`,
    ].join('\n');
    const [file, args] = asUser(user, [process.execPath, '-e', server]);
    const fake = spawn(file, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => fake.kill('SIGKILL'));
    let heard = '';
    fake.stdout.on('data', (chunk: Buffer) => (heard += chunk.toString()));
    await waitFor(() => heard.includes('ready'), 'the other user\'s fake daemon to listen');

    const env = cliEnv(sandbox, { SANDBOXD_RUNTIME_DIR: rt });
    const expected = {
      code: 'INSECURE_DIRECTORY',
      message: `refusing to connect: ${rt} is owned by uid ${String(user.uid)}, not by you (uid ${String(process.getuid?.() ?? 0)}); another user may be posing as sandboxd`,
      remedy: `Remove ${rt} (it is not yours; ask an administrator if you cannot), or set SANDBOXD_RUNTIME_DIR to a directory of your own.`,
    };
    for (const args of [['status', '--json'], ['plan', '--engine', 'podman', '--json']]) {
      const result = await cli(args, env);
      expect(result.exitCode).toBe(1);
      expect((JSON.parse(result.stdout) as JsonError).error).toEqual(expected);
    }
    expect(heard).toBe('ready\n');
    expect(daemonsFor(rt)).toEqual([]);
  });

  it('refuses a runtime dir it cannot even inspect, naming it', async () => {
    const user = otherUser();
    const sandbox = makeSandbox(cleanup);
    const rt = path.join(sandbox.dir, 'rt');
    const [file, args] = asUser(user, [process.execPath, CLI, 'status', '--json']);
    const result = await execa(file, args, { env: cliEnv(sandbox, { HOME: '/' }), extendEnv: false, reject: false, timeout: 30_000 });
    expect(result.exitCode).toBe(1);
    const body = JSON.parse(result.stdout) as JsonError;
    expect(body.error.code).toBe('INSECURE_DIRECTORY');
    expect(body.error.message).toBe(`refusing to connect: cannot check ${rt}: EACCES: permission denied, lstat '${rt}'`);
    expect(body.error.remedy).toBe(`Make ${sandbox.dir} reachable by you, or set SANDBOXD_RUNTIME_DIR to a directory of your own.`);
  });
});
