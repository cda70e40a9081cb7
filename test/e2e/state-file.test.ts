import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, exitOf, makeSandbox, pidAlive, startDaemon, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const VM_DIR = '/tmp/sandboxd-0123456789/abcdef012345';

/** A long-lived process whose command line contains "ssh" and a VM dir, like a tunnel would. */
function decoy(): { pid: number; argv: string[]; exited: Promise<unknown> } {
  const script = 'setInterval(() => {}, 1000)';
  const child = spawn(process.execPath, ['-e', script, 'ssh', '-R', `${VM_DIR}/a.sock:/agent`], { stdio: 'ignore' });
  cleanup.add(() => child.kill('SIGKILL'));
  return { pid: child.pid ?? 0, argv: [process.execPath, '-e', script, 'ssh', '-R', `${VM_DIR}/a.sock:/agent`], exited: exitOf(child, 20_000) };
}

function writeState(stateDir: string, tunnels: unknown[]): void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(path.join(stateDir, 'state.json'), JSON.stringify({ version: 1, tunnels }), { mode: 0o600 });
}

describe('the state file a previous daemon left', () => {
  it('a poisoned record (empty vmDir, argv that is not the process) kills nothing', async () => {
    const sandbox = makeSandbox(cleanup);
    const victim = decoy();
    const other = decoy();
    await waitFor(() => pidAlive(victim.pid) && pidAlive(other.pid), 'the decoys to start');
    writeState(sandbox.env.SANDBOXD_STATE_DIR, [
      { id: 'tun_abcdef012345', pid: victim.pid, vmDir: '', connection: 'm', agentSocket: '/a', argv: victim.argv },
      { id: 'tun_abcdef012346', pid: other.pid, vmDir: VM_DIR, connection: 'm', agentSocket: '/a', argv: ['ssh', '-R', `${VM_DIR}/a.sock:/agent`] },
      { id: 'tun_abcdef012347', pid: 1, vmDir: VM_DIR, connection: 'm', agentSocket: '/a', argv: ['ssh', VM_DIR] },
    ]);
    await startDaemon(cliEnv(sandbox), cleanup);
    expect(pidAlive(victim.pid)).toBe(true);
    expect(pidAlive(other.pid)).toBe(true);
  });

  it('a valid record whose pid still runs exactly the recorded argv is reaped', async () => {
    const sandbox = makeSandbox(cleanup);
    const orphan = decoy();
    await waitFor(() => pidAlive(orphan.pid), 'the orphan to start');
    writeState(sandbox.env.SANDBOXD_STATE_DIR, [{ id: 'tun_abcdef012345', pid: orphan.pid, vmDir: VM_DIR, connection: 'm', agentSocket: '/a', argv: orphan.argv }]);
    await startDaemon(cliEnv(sandbox), cleanup);
    await orphan.exited;
  });
});

describe('state files that are not regular files (a FIFO, a symlink, a directory)', () => {
  it('make no acquire hang: each is logged, moved aside and its state starts afresh', async () => {
    const sandbox = makeSandbox(cleanup);
    const stateDir = sandbox.env.SANDBOXD_STATE_DIR;
    mkdirSync(path.join(stateDir, 'containers'), { recursive: true, mode: 0o700 });
    // Every state file an acquire reads, as FIFOs nobody ever writes to.
    const fifos = ['helpers.json', 'state.json', 'tunnel-roots.json', 'endpoints.json', path.join('containers', 'ses_0123456789abcdef.json')];
    for (const name of fifos) execFileSync('mkfifo', ['-m', '600', path.join(stateDir, name)]);
    mkdirSync(path.join(stateDir, 'tunnel-secret'));
    const env = cliEnv(sandbox);
    const plan = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 30_000);
    expect({ code: plan.exitCode, stderr: plan.stderr }).toEqual({ code: 0, stderr: '' });
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    for (const name of ['state.json', 'endpoints.json', 'ses_0123456789abcdef.json']) {
      expect(log).toMatch(new RegExp(`"file":"[^"]*${name.replace('.', '\\.')}","found":"a FIFO".*starting that state afresh`));
    }
    expect(readdirSync(stateDir).filter((name) => name.includes('.refused-')).length).toBeGreaterThanOrEqual(3);
    expect(pidAlive((JSON.parse(readFileSync(path.join(stateDir, 'daemon.pid'), 'utf8')) as { pid: number }).pid)).toBe(true);
  });
});
