import { chmodSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, daemonsFor, makeSandbox, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface JsonError {
  error: { code: string; message: string; remedy: string };
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
      expect(run.exitCode).toBe(0);
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
    const stateDir = sandbox.env.SANDBOXD_STATE_DIR;
    mkdirSync(stateDir, { recursive: true });
    chmodSync(stateDir, 0o777);
    const result = await cli(['plan', '--engine', 'podman'], cliEnv(sandbox));
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain('sandboxd: the daemon exited with code 1 while starting');
    expect(result.stderr).toContain(`${stateDir} has mode 0777`);
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
      message: 'the daemon speaks protocol 99, this client speaks 1',
      remedy: 'Run `sandboxd restart` to start the installed version.',
    });
    const plan = await cli(['plan', '--engine', 'podman'], cliEnv(sandbox));
    expect(plan.stderr).toContain('sandboxd: the daemon speaks protocol 99, this client speaks 1');
  });

  it('start is idempotent and reports the running daemon', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const first = JSON.parse((await cli(['start', '--json'], env)).stdout) as { pid: number };
    const second = JSON.parse((await cli(['start', '--json'], env)).stdout) as { pid: number };
    expect(second.pid).toBe(first.pid);
    await waitFor(() => daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR).length === 1, 'one daemon');
  });
});
