import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, Cleanup, waitFor } from '../helpers.js';
import { createTestUser, labImageTar, type Shell, type TestUser } from '../lab/test-user.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Status {
  pid: number;
  socketPath: string;
  uptimeMs: number;
  counts: { sessions: number };
}

async function statusIn(user: TestUser, shell: Shell): Promise<Status> {
  const result = await user.cli(shell, ['status', '--json']);
  expect({ shell, code: result.exitCode, stderr: result.stderr }).toEqual({ shell, code: 0, stderr: '' });
  return JSON.parse(String(result.stdout)) as Status;
}

/**
 * One daemon per user, as a user meets it, with a real account: a login shell (XDG_RUNTIME_DIR set), `su -`
 * and a `sudo -u` shape (neither has it) share one state dir, so they must share one daemon.
 */
describe.skipIf(labMissing)('one daemon per user, whatever the shell (a real non-root user)', () => {
  it('a login shell, `su -` and a `sudo -u` shape all reach the one daemon, on one socket beside the state', async () => {
    const user = await createTestUser(cleanup);
    const started = await user.cli('login', ['start', '--json']);
    expect({ code: started.exitCode, stderr: started.stderr }).toEqual({ code: 0, stderr: '' });
    const { pid, socketPath } = JSON.parse(String(started.stdout)) as Status;
    expect(socketPath).toBe(path.join(user.home, '.local/state/sandboxd/run/sandboxd.sock'));
    for (const shell of ['su', 'sudo', 'login'] as const) {
      expect(await statusIn(user, shell)).toMatchObject({ pid, socketPath });
      const plan = await user.cli(shell, ['plan', '--engine', 'podman', '--ssh-agent', 'off', '--no-workdir', '--json']);
      expect({ shell, code: plan.exitCode, stderr: plan.stderr }).toEqual({ shell, code: 0, stderr: '' });
    }
    expect(user.daemons()).toEqual([pid]);
    // Nothing in the login session's runtime dir: the layout that used to split the daemons.
    expect(existsSync(path.join(user.runtimeDir, 'sandboxd'))).toBe(false);
  });

  it('a container held under the login shell survives several lease TTLs of `run` and `start` from `su -`', async () => {
    const { image } = podmanLab();
    const user = await createTestUser(cleanup, { tar: await labImageTar(lab.dir, cleanup), name: image });
    // Every shell auto-starts the daemon with a 2 s lease (its claim window for a predecessor's
    // records is 4 s), so a minute of the old behaviour fits in a few seconds.
    const bin = path.join(user.home, 'sandboxd-short-lease');
    await user.run('sh', ['-c', `printf '#!/bin/sh\\nexec %s %s "$@" --lease-ttl 2\\n' '${process.execPath}' '${CLI}' > ${bin} && chmod 755 ${bin}`]);
    const settings = { SANDBOXD_BIN: bin };
    const held = user.spawn('login', ['run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--no-workdir', '--', image, 'sh', '-c', 'echo started; sleep 300'], settings);
    let out = '';
    held.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    held.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('started') || held.exitCode !== null, 'the held container to start', 90_000);
    expect(out).toContain('started');
    const ps = async (): Promise<string[]> => String((await user.run('podman', ['ps', '-q', '--no-trunc', '--filter', 'label=sandboxd.session'])).stdout).split('\n').filter((line) => line !== '');
    const [container] = await ps();
    expect(container).toBeDefined();
    const daemon = await statusIn(user, 'login');

    // From the other shell, until that shell's daemon has lived five lease TTLs (whichever daemon it reaches).
    let rounds = 0;
    for (;;) {
      const run = await user.cli('su', ['run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--no-workdir', '--', image, 'true'], settings, 90_000);
      expect({ code: run.exitCode, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
      expect((await user.cli('su', ['start'], settings)).exitCode).toBe(0);
      rounds += 1;
      const seen = await statusIn(user, 'su');
      if (seen.uptimeMs > 10_000 && rounds >= 3) break;
      expect(rounds).toBeLessThan(60);
    }
    const log = readFileSync(path.join(user.home, '.local/state/sandboxd/log/sandboxd.log'), 'utf8');
    expect(log).not.toContain('removed the session\'s container');
    expect(await ps()).toEqual([container]);
    expect(await statusIn(user, 'su')).toMatchObject({ pid: daemon.pid, counts: { sessions: 1 } });
    expect(user.daemons()).toEqual([daemon.pid]);
    held.kill('SIGTERM');
  });

  it('`install` without a user bus (`su -`) changes nothing, keeps the daemon, and says what works; doctor does not offer it', async () => {
    const user = await createTestUser(cleanup);
    const started = await user.cli('su', ['start', '--json']);
    expect(started.exitCode).toBe(0);
    const { pid } = JSON.parse(String(started.stdout)) as Status;
    // The real systemctl: no user manager runs here, as under `su -` without lingering.
    const install = await user.cli('su', ['install', '--json']);
    expect(install.exitCode).toBe(1);
    const error = (JSON.parse(String(install.stdout)) as { error: { code: string; message: string; remedy: string } }).error;
    expect(error.code).toBe('SERVICE_MANAGER_UNREACHABLE');
    if (existsSync('/run/systemd/system')) {
      // systemd runs, but this shell has no user bus: lingering for this very user is the way.
      expect(error.message).toMatch(/^systemd cannot be reached from this shell: `systemctl --user show-environment` failed: Failed to connect to bus/);
      expect(error.remedy).toContain(`loginctl enable-linger ${user.name}`);
    } else {
      // No systemd at all (a container, WSL without it): auto-start is the way, and nothing else is offered.
      expect(error.message).toMatch(/^systemd is not the init system here \(no \/run\/systemd\/system/);
      expect(error.remedy).toContain('auto-start');
      expect(error.remedy).not.toContain('loginctl');
    }
    expect(existsSync(path.join(user.home, '.config/systemd'))).toBe(false);
    expect(await statusIn(user, 'su')).toMatchObject({ pid });

    const doctor = await user.cli('su', ['doctor', '--json']);
    const service = (JSON.parse(String(doctor.stdout)) as { checks: { name: string; state: string; detail: string; remedy: string | null }[] }).checks.find((check) => check.name === 'login service');
    expect(service).toMatchObject({ state: 'skip', remedy: null });
    expect(service?.detail).toMatch(existsSync('/run/systemd/system') ? /cannot be reached from this shell/ : /systemd is not the init system here/);
    expect(service?.detail).not.toContain('`sandboxd install` starts it');
  });
});
