import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, statSync, existsSync, readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, daemonPid, daemonsFor, exitOf, makeSandbox, pidAlive, startDaemon, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** The dead pids whose lock a daemon logged taking over. */
function takeovers(logDir: string): number[] {
  return readFileSync(path.join(logDir, 'sandboxd.log'), 'utf8')
    .split('\n')
    .filter((line) => line.includes('took over the lock of a daemon that is gone'))
    .map((line) => (JSON.parse(line) as { deadPid: number }).deadPid);
}

describe('sandboxd daemon (real processes)', () => {
  it('creates a 0700 runtime dir and a 0600 socket, and answers status', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const daemon = await startDaemon(env, cleanup);
    const runtimeDir = sandbox.env.SANDBOXD_RUNTIME_DIR;
    expect(statSync(runtimeDir).mode & 0o777).toBe(0o700);
    const socket = statSync(path.join(runtimeDir, 'sandboxd.sock'));
    expect(socket.isSocket()).toBe(true);
    expect(socket.mode & 0o777).toBe(0o600);
    expect(statSync(sandbox.env.SANDBOXD_LOG_DIR).mode & 0o777).toBe(0o700);

    const status = await cli(['status', '--json'], env);
    expect(status.exitCode).toBe(0);
    const body = JSON.parse(status.stdout) as { running: boolean; pid: number; socketPath: string; counts: { sessions: number } };
    expect(body).toMatchObject({ running: true, pid: daemon.pid, socketPath: path.join(runtimeDir, 'sandboxd.sock') });
    expect(body.counts.sessions).toBe(0);

    const human = await cli(['status'], env);
    expect(human.stdout).toContain(`pid:       ${daemon.pid}`);
  });

  it('refuses a second daemon at once with "already running (pid N)"', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = await startDaemon(env, cleanup);
    const started = Date.now();
    const second = await cli(['daemon'], env);
    expect(second.exitCode).not.toBe(0);
    expect(second.stderr).toContain(`already running (pid ${first.pid})`);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(pidAlive(first.pid)).toBe(true);
  });

  it('under a service manager, a second daemon leaves the first to serve and exits 0 (launchd\'s KeepAlive does not respawn it)', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = await startDaemon(env, cleanup);
    for (const manager of ['launchd', 'systemd']) {
      const second = await cli(['daemon', '--service-manager', manager], env);
      expect({ code: second.exitCode, stderr: second.stderr }).toEqual({ code: 0, stderr: `sandboxd: already running (pid ${String(first.pid)}); leaving it to serve` });
    }
    expect(pidAlive(first.pid)).toBe(true);
  });

  it('one daemon per state dir: a second runtime dir for the same state dir is refused; a second state dir on the same socket never takes it', async () => {
    const sandbox = makeSandbox(cleanup);
    const first = await startDaemon(cliEnv(sandbox), cleanup);
    const otherRuntime = await cli(['daemon'], cliEnv(sandbox, { SANDBOXD_RUNTIME_DIR: path.join(sandbox.dir, 'rt2') }));
    expect(otherRuntime.exitCode).toBe(1);
    expect(otherRuntime.stderr).toContain(`already running (pid ${String(first.pid)})`);
    const otherState = await cli(['daemon'], cliEnv(sandbox, { SANDBOXD_STATE_DIR: path.join(sandbox.dir, 'state2') }));
    expect(otherState.exitCode).toBe(1);
    expect(otherState.stderr).toContain(`another daemon answers on ${path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock')}`);
    expect((JSON.parse((await cli(['status', '--json'], cliEnv(sandbox))).stdout) as { pid: number }).pid).toBe(first.pid);
  });

  it('status and doctor name the socket in use and warn about a daemon or socket of an earlier layout', async () => {
    const sandbox = makeSandbox(cleanup);
    const xdg = path.join(sandbox.dir, 'xdg');
    const strayDir = path.join(xdg, 'sandboxd');
    mkdirSync(strayDir, { recursive: true, mode: 0o700 });
    const straySocket = path.join(strayDir, 'sandboxd.sock');
    // Stands in for a daemon of an earlier release, still serving where that release put it.
    const stray = spawn(process.execPath, ['-e', `
      const http = require('node:http');
      http.createServer((req, res) => {
        res.setHeader('sandboxd-protocol', '2');
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ version: '0.0.9', protocol: 2, pid: process.pid, counts: { sessions: 1, tunnels: 0 } }));
      }).listen(${JSON.stringify(straySocket)}, () => console.log('listening'));`], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => stray.kill('SIGKILL'));
    let heard = '';
    stray.stdout.on('data', (chunk: Buffer) => (heard += chunk.toString()));
    await waitFor(() => heard.includes('listening'), 'the stray to listen');
    const env = cliEnv(sandbox, { XDG_RUNTIME_DIR: xdg });
    const socket = path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock');

    const stopped = await cli(['status'], env);
    expect(stopped.exitCode).toBe(3);
    expect(stopped.stdout).toContain(`sandboxd is not running (socket ${socket})`);
    expect(stopped.stderr).toContain(`sandboxd: warning: another sandboxd (pid ${String(stray.pid)}, 0.0.9) answers on ${straySocket}`);
    expect(stopped.stderr).toContain(`Stop it: \`kill ${String(stray.pid)}\`.`);

    const daemon = await startDaemon(env, cleanup);
    const running = await cli(['status', '--json'], env);
    expect(JSON.parse(running.stdout)).toMatchObject({ running: true, pid: daemon.pid, socketPath: socket });
    expect(running.stderr).toContain(`answers on ${straySocket}`);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).toContain('a daemon of an earlier layout answers; its tunnels and containers are left alone');

    stray.kill('SIGKILL');
    await exitOf(stray);
    // What a killed stray leaves: a socket nothing answers on.
    expect(existsSync(straySocket)).toBe(true);
    const doctor = JSON.parse((await cli(['doctor', '--json'], env, 45_000)).stdout) as { checks: { name: string; state: string; detail: string; remedy: string }[] };
    expect(doctor.checks.find((check) => check.name === 'daemon')?.detail).toContain(`socket ${socket}`);
    expect(doctor.checks.find((check) => check.name === 'other daemons')).toMatchObject({
      state: 'fail',
      detail: expect.stringContaining(`${straySocket} is left over from an earlier release's layout`) as string,
      remedy: expect.stringContaining(`rm ${straySocket}`) as string,
    });
  });

  it('starts again after kill -9 without manual clean-up', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = await startDaemon(env, cleanup);
    first.child.kill('SIGKILL');
    await exitOf(first.child);
    expect(existsSync(path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock'))).toBe(true);

    const second = await startDaemon(env, cleanup);
    expect(second.pid).not.toBe(first.pid);
    const status = await cli(['status', '--json'], env);
    expect((JSON.parse(status.stdout) as { pid: number }).pid).toBe(second.pid);
    // Taken over from the pid record, not after waiting for the lock to go stale.
    expect(takeovers(sandbox.env.SANDBOXD_LOG_DIR)).toEqual([first.pid]);
  });

  it('after kill -9, of several daemons starting at once exactly one takes over', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = await startDaemon(env, cleanup);
    first.child.kill('SIGKILL');
    await exitOf(first.child);

    const starters = Array.from({ length: 4 }, () => startDaemon(env, cleanup).then(
      (daemon) => ({ daemon, error: null }),
      (error: unknown) => ({ daemon: null, error: String(error) }),
    ));
    const results = await Promise.all(starters);
    const winners = results.flatMap((result) => (result.daemon === null ? [] : [result.daemon.pid]));
    expect(winners).toHaveLength(1);
    for (const result of results) {
      if (result.daemon === null) expect(result.error).toContain(`already running (pid ${String(winners[0])})`);
    }
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual(winners);
    expect(takeovers(sandbox.env.SANDBOXD_LOG_DIR)).toEqual([first.pid]);
  });

  it.each(['SIGTERM', 'SIGINT'] as const)('stops on %s: exit 0, socket, pid file and lock removed', async (signal) => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const daemon = await startDaemon(env, cleanup);
    const state = sandbox.env.SANDBOXD_STATE_DIR;
    expect(existsSync(path.join(state, 'daemon.pid'))).toBe(true);
    daemon.child.kill(signal);
    const exit = await exitOf(daemon.child, 5_000);
    expect(exit.code).toBe(0);
    expect(existsSync(path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock'))).toBe(false);
    expect(existsSync(path.join(state, 'daemon.pid'))).toBe(false);
    expect(existsSync(path.join(state, 'daemon.lock'))).toBe(false);
  });

  it('stops on `sandboxd stop` (POST /v1/shutdown) and status then exits 3', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const daemon = await startDaemon(env, cleanup);
    const stop = await cli(['stop'], env);
    expect(stop.stdout).toContain('sandboxd stopped');
    expect((await exitOf(daemon.child, 5_000)).code).toBe(0);
    const status = await cli(['status'], env);
    expect(status.exitCode).toBe(3);
    expect(status.stdout).toContain('sandboxd is not running');
    const json = await cli(['status', '--json'], env);
    expect(json.exitCode).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ running: false });
    expect(daemonPid(sandbox.env)).toBeNull();
  });

  it('start, restart and stop manage a background daemon', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const start = await cli(['start', '--json'], env);
    expect(start.exitCode).toBe(0);
    const first = (JSON.parse(start.stdout) as { pid: number }).pid;
    const restart = await cli(['restart', '--json'], env);
    expect(restart.exitCode).toBe(0);
    const second = (JSON.parse(restart.stdout) as { pid: number }).pid;
    expect(second).not.toBe(first);
    expect(pidAlive(first)).toBe(false);
    expect((await cli(['stop'], env)).exitCode).toBe(0);
    await waitFor(() => !pidAlive(second), 'daemon to exit');
  });

  it('refuses a runtime dir that others can read, naming the path and the fix', async () => {
    const sandbox = makeSandbox(cleanup);
    const rt = sandbox.env.SANDBOXD_RUNTIME_DIR;
    mkdirSync(rt, { recursive: true });
    chmodSync(rt, 0o755);
    const result = await cli(['daemon'], cliEnv(sandbox));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(`sandboxd: ${rt} has mode 0755; it must be at most 0700`);
    expect(result.stderr).toContain(`chmod 0700 ${rt}`);
  });

  it('refuses a runtime dir path that is a file', async () => {
    const sandbox = makeSandbox(cleanup);
    const rt = sandbox.env.SANDBOXD_RUNTIME_DIR;
    writeFileSync(rt, 'not a dir');
    const result = await cli(['daemon', '--log', 'stdout'], cliEnv(sandbox));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(rt);
  });

  it('refuses an over-long socket path instead of letting Node truncate it', async () => {
    const base = mkdtempSync('/tmp/sbx-');
    cleanup.add(() => {
      rmSync(base, { recursive: true, force: true });
    });
    const sandbox = makeSandbox(cleanup);
    const longDir = path.join(base, 'x'.repeat(100));
    const result = await cli(['daemon'], cliEnv(sandbox, { SANDBOXD_RUNTIME_DIR: longDir }));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain(`socket path ${longDir}/sandboxd.sock is`);
    expect(result.stderr).toContain('linux allows 107');
    expect(result.stderr).toContain('SANDBOXD_RUNTIME_DIR');
    expect(existsSync(longDir)).toBe(false);

    const status = await cli(['status', '--json'], cliEnv(sandbox, { SANDBOXD_RUNTIME_DIR: longDir }));
    expect(status.exitCode).toBe(1);
    expect(JSON.parse(status.stdout)).toMatchObject({ error: { code: 'SOCKET_PATH_TOO_LONG' } });
  });
});
