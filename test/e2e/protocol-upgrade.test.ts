import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, exitOf, makeSandbox, pidAlive, waitFor } from '../helpers.js';

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
    expect(status.protocol).toBe(2);
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
