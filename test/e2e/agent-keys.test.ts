import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { inspectAgentSocket } from '../../daemon/plan/agent-socket.js';
import { CLI, Cleanup, cliEnv, makeSandbox, startAgent, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** A real ssh-agent with no identities: launchd's agent on a Mac where the keys live in 1Password. */
async function emptyAgent(dir: string): Promise<string> {
  const socket = path.join(dir, 'empty-agent.sock');
  const agent = spawn('ssh-agent', ['-D', '-a', socket], { stdio: 'ignore' });
  cleanup.add(() => agent.kill('SIGKILL'));
  await waitFor(async () => (await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: socket }, reject: false })).exitCode === 1, 'the empty agent to answer');
  return socket;
}

describe('an agent that answers but holds no keys (real ssh-agent)', () => {
  it('counts the keys as ssh-add -l does', async () => {
    const sandbox = makeSandbox(cleanup);
    const withKey = await startAgent(sandbox.dir, cleanup);
    expect(await inspectAgentSocket(withKey.socket)).toEqual({ usable: true, path: withKey.socket, keys: 1 });
    const empty = await emptyAgent(sandbox.dir);
    expect(await inspectAgentSocket(empty)).toEqual({ usable: true, path: empty, keys: 0 });
    // Another socket is only dialled, never spoken to in the agent protocol.
    expect(await inspectAgentSocket(withKey.socket, 'proxy')).toEqual({ usable: true, path: withKey.socket, keys: null });
  });

  it('warns in the plan, with the remedy', async () => {
    const sandbox = makeSandbox(cleanup);
    const empty = await emptyAgent(sandbox.dir);
    const work = path.join(sandbox.dir, 'work');
    mkdirSync(work);
    const plan = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--ssh-bridge', 'mount', '--json'], { cwd: work, env: cliEnv(sandbox, { SSH_AUTH_SOCK: empty }), extendEnv: false });
    const body = JSON.parse(plan.stdout) as { session: { ssh: { status: string } }; plan: { warnings: string[] } };
    expect(body.session.ssh.status).toBe('forwarded');
    expect(body.plan.warnings).toContain(
      `the ssh agent on SSH_AUTH_SOCK (${empty}) holds no keys, so the sandbox can authenticate with none: add one with \`ssh-add\`, or point SSH_AUTH_SOCK at the agent your ~/.ssh/config names in IdentityAgent (1Password, Secretive)`,
    );
  });
});
