import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, exitOf, makeSandbox, pidAlive, waitFor, type Sandbox } from '../helpers.js';
import { buildOlderRelease, type OlderRelease } from '../lab/older-release.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/**
 * Stands in for a daemon of an older sandboxd release (protocol 1) still running after an upgrade:
 * it answers status in every release's shape and stops on /v1/shutdown, as the real one does.
 */
async function olderDaemon(socketPath: string, sessions: number) {
  const script = `
    const http = require('node:http');
    const server = http.createServer((req, res) => {
      res.setHeader('sandboxd-protocol', '1');
      res.setHeader('content-type', 'application/json');
      if (req.url === '/v1/status') return res.end(JSON.stringify({ version: '0.1.0', protocol: 1, pid: process.pid, counts: { sessions: ${String(sessions)}, tunnels: 0 } }));
      if (req.url === '/v1/shutdown') { res.end(JSON.stringify({ stopping: true })); server.close(() => process.exit(0)); return; }
      res.statusCode = 409;
      res.end(JSON.stringify({ error: { code: 'PROTOCOL_MISMATCH', message: 'old', remedy: 'old' } }));
    });
    server.listen(${JSON.stringify(socketPath)}, () => console.log('listening'));`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanup.add(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  await waitFor(() => out.includes('listening'), 'the older daemon to listen');
  return child;
}

describe('a newer client meets an older daemon (protocol policy, step 4)', () => {
  function setup() {
    const sandbox = makeSandbox(cleanup);
    mkdirSync(sandbox.env.SANDBOXD_RUNTIME_DIR, { recursive: true, mode: 0o700 });
    return { sandbox, socketPath: path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock') };
  }

  it('stops an idle older daemon and starts its own', async () => {
    const { sandbox, socketPath } = setup();
    const older = await olderDaemon(socketPath, 0);
    const env = cliEnv(sandbox);
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 60_000);
    expect({ code: plan.exitCode, stderr: plan.stderr }).toEqual({ code: 0, stderr: '' });
    expect(await exitOf(older, 5_000)).toEqual({ code: 0, signal: null });
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { protocol: number; pid: number };
    expect(status.protocol).toBe(PROTOCOL_VERSION);
    expect(status.pid).not.toBe(older.pid);
  });

  it('leaves an older daemon that holds sessions alone, and says what to do', async () => {
    const { sandbox, socketPath } = setup();
    const older = await olderDaemon(socketPath, 1);
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], cliEnv(sandbox));
    expect(plan.exitCode).toBe(1);
    expect((JSON.parse(plan.stdout) as { error: { code: string } }).error.code).toBe('PROTOCOL_MISMATCH');
    expect(pidAlive(older.pid ?? 0)).toBe(true);
    // `version` still says which daemon runs, whatever protocol it speaks.
    const version = JSON.parse((await cli(['version', '--json'], cliEnv(sandbox))).stdout) as { daemon: { version: string; protocol: number; pid: number } };
    expect(version.daemon).toEqual({ version: '0.1.0', protocol: 1, pid: older.pid });
  });
});

/** pids of every `sandboxd daemon`, of any release, whose environment names this runtime dir. */
function anyDaemonsFor(runtimeDir: string): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).flatMap((entry) => {
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      return argv.some((arg) => arg.endsWith('sandboxd.js')) && argv.includes('daemon') && environ.includes(`SANDBOXD_RUNTIME_DIR=${runtimeDir}`) ? [Number(entry)] : [];
    } catch {
      return [];
    }
  });
}

describe('an upgrade from a build of this repo speaking protocol 1 (real daemons of both builds)', () => {
  const buildCleanup = new Cleanup();
  const testCleanup = new Cleanup();
  let older: OlderRelease;
  beforeAll(async () => {
    older = await buildOlderRelease(1, buildCleanup);
  }, 300_000);
  afterAll(() => buildCleanup.run());
  afterEach(() => testCleanup.run());

  const olderCli = (args: string[], env: NodeJS.ProcessEnv) => execa(process.execPath, [older.cli, ...args], { env, extendEnv: false, reject: false, timeout: 30_000 });

  async function olderStatus(env: NodeJS.ProcessEnv): Promise<{ pid: number; protocol: number; counts: { sessions: number } }> {
    const status = await olderCli(['status', '--json'], env);
    expect(status.exitCode, status.stderr).toBe(0);
    return JSON.parse(status.stdout) as { pid: number; protocol: number; counts: { sessions: number } };
  }

  it('`sandboxd start` of the newer release replaces an idle older daemon', async () => {
    const sandbox = makeSandbox(testCleanup);
    const env = cliEnv(sandbox);
    expect((await olderCli(['start'], env)).exitCode).toBe(0);
    const before = await olderStatus(env);
    expect(before.protocol).toBe(1);
    const started = await cli(['start', '--json'], env);
    expect({ code: started.exitCode, stderr: started.stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(started.stdout)).toMatchObject({ running: true, protocol: PROTOCOL_VERSION });
    expect(pidAlive(before.pid)).toBe(false);
    expect(anyDaemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toHaveLength(1);
  });

  it('under held sessions the older daemon keeps serving them, stops once they end, and one daemon of the new version remains', async () => {
    const sandbox: Sandbox = makeSandbox(testCleanup);
    const env = cliEnv(sandbox);
    // A program that embeds the older client holds two sessions, heartbeating, until told to release them.
    const holder = spawn(process.execPath, ['--input-type=module', '-e', `
      import { acquireSession } from ${JSON.stringify(older.client)};
      const sessions = [await acquireSession({ engine: 'podman', sshAgent: 'off', label: 'old-1' }), await acquireSession({ engine: 'podman', sshAgent: 'off', label: 'old-2' })];
      console.log(JSON.stringify(sessions.map((session) => session.id)));
      process.stdin.once('data', async () => {
        for (const session of sessions) await session.release();
        console.log('released');
      });
    `], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    testCleanup.add(() => holder.kill('SIGKILL'));
    let out = '';
    holder.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const ids = JSON.parse(await waitFor(() => /^\[.*\]$/m.exec(out)?.[0], 'the older client to hold two sessions', 45_000)) as string[];
    const olderDaemon = await olderStatus(env);
    expect(olderDaemon).toMatchObject({ protocol: 1, counts: { sessions: 2 } });

    const refused = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env);
    expect(refused.exitCode).toBe(1);
    expect((JSON.parse(refused.stdout) as { error: { code: string; message: string } }).error).toEqual(expect.objectContaining({
      code: 'PROTOCOL_MISMATCH',
      message: `the running daemon (pid ${String(olderDaemon.pid)}) is an older sandboxd (protocol 1; this client speaks ${String(PROTOCOL_VERSION)}): it keeps serving its 2 sessions and stops once they end; the next start runs this version`,
    }));
    // Asked to make way, it still serves every session it held, to their own clients.
    const listed = JSON.parse((await olderCli(['sessions', 'ls', '--json'], env)).stdout) as { id: string }[];
    expect(listed.map((session) => session.id).sort()).toEqual([...ids].sort());
    expect(pidAlive(olderDaemon.pid)).toBe(true);

    holder.stdin.write('release\n');
    await waitFor(() => out.includes('released'), 'the older client to release its sessions');
    await waitFor(() => !pidAlive(olderDaemon.pid), 'the older daemon to stop once idle');
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env);
    expect({ code: plan.exitCode, stderr: plan.stderr }).toEqual({ code: 0, stderr: '' });
    const status = JSON.parse((await cli(['status', '--json'], env)).stdout) as { pid: number; protocol: number };
    expect(status.protocol).toBe(PROTOCOL_VERSION);
    expect(anyDaemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([status.pid]);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).toContain('the last session ended; a newer sandboxd takes over');
  });
});
