import { spawn } from 'node:child_process';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, cli, makeSandbox, waitFor } from '../helpers.js';
import { labConnection, startSshd } from '../lab/sshd.js';
import { execa } from 'execa';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Check {
  name: string;
  state: 'ok' | 'fail' | 'skip';
  detail: string;
  remedy: string | null;
}

async function doctor(env: NodeJS.ProcessEnv): Promise<{ code: number | undefined; ok: boolean; checks: Map<string, Check> }> {
  const result = await cli(['doctor', '--json'], env, 45_000);
  const body = JSON.parse(result.stdout) as { ok: boolean; checks: Check[] };
  return { code: result.exitCode, ok: body.ok, checks: new Map(body.checks.map((check) => [check.name, check])) };
}

/** An ssh-agent that answers but holds no keys (launchd's empty agent on a Mac with 1Password). */
async function emptyAgent(dir: string): Promise<string> {
  const socket = path.join(dir, 'empty-agent.sock');
  const agent = spawn('ssh-agent', ['-D', '-a', socket], { stdio: 'ignore' });
  cleanup.add(() => agent.kill('SIGKILL'));
  await waitFor(async () => (await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: socket }, reject: false })).exitCode === 1, 'ssh-agent to answer');
  return socket;
}

describe.skipIf(labMissing)('sandboxd doctor against the lab (real sshd, ssh-agent, podman)', () => {
  it('healthy: every check passes or does not apply, exit 0; broken: an agent without keys and a machine whose sshd is down fail with remedies, exit 1', async () => {
    const { env: podmanEnv } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const sshd = await startSshd(path.join(sandbox.dir, 'vm'), cleanup);
    const { env } = await labConnection(sandbox, podmanEnv, sshd, cleanup);

    const healthy = await doctor(env);
    expect([...healthy.checks.values()].filter((check) => check.state === 'fail')).toEqual([]);
    expect({ code: healthy.code, ok: healthy.ok }).toEqual({ code: 0, ok: true });
    expect(healthy.checks.get('podman connection')).toMatchObject({ state: 'ok', detail: expect.stringContaining('lab (default)') as string });
    expect(healthy.checks.get('machine over ssh')).toMatchObject({ state: 'ok', detail: 'lab answers' });
    expect(healthy.checks.get('ssh agent')).toMatchObject({ state: 'ok', detail: expect.stringContaining('1 key') as string });
    const text = await cli(['doctor'], env, 45_000);
    expect(text.stdout).toMatch(/^✓ node: v\d+/m);

    await sshd.stop();
    const broken = await doctor({ ...env, SSH_AUTH_SOCK: await emptyAgent(sandbox.dir) });
    expect({ code: broken.code, ok: broken.ok }).toEqual({ code: 1, ok: false });
    expect(broken.checks.get('machine over ssh')).toMatchObject({
      state: 'fail',
      detail: expect.stringMatching(/^the machine behind connection lab is unreachable: .*Connection refused/) as string,
      remedy: 'Run `podman machine start` (or bring the remote host up); the tunnel recovers by itself.',
    });
    expect(broken.checks.get('ssh agent')).toMatchObject({
      state: 'fail',
      detail: expect.stringContaining('answers but holds no keys') as string,
      remedy: 'Add a key with `ssh-add`, or point SSH_AUTH_SOCK at the agent your ~/.ssh/config names in IdentityAgent (1Password, Secretive).',
    });
    const brokenText = await cli(['doctor'], { ...env, SSH_AUTH_SOCK: path.join(sandbox.dir, 'none.sock') }, 45_000);
    expect(brokenText.exitCode).toBe(1);
    expect(brokenText.stdout).toMatch(/^✗ machine over ssh: .*\n {4}Run `podman machine start`/m);
  });
});
