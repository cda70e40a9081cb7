import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { Cleanup } from '../helpers.js';
import { createTestUser, labImageTar, packTarball } from '../lab/test-user.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/**
 * The package as a person installs it: the tarball `npm pack` makes, installed by a normal account
 * into a user prefix (no sudo), with no registry to fetch anything from, then the main job run
 * from that install against the lab's rootless podman and the user's own agent.
 */
describe.skipIf(labMissing)('the packed tarball, installed offline by a non-root user with a user prefix', () => {
  it('installs with no dependency to fetch, and `sandboxd run` from it forwards the agent', async () => {
    const { image } = podmanLab();
    const tarball = await packTarball(cleanup);
    const user = await createTestUser(cleanup, { tar: await labImageTar(lab.dir, cleanup), name: image });

    const prefix = path.join(user.home, '.local');
    // Nothing but loopback answers here anyway; the bogus registry and offline mode make sure an
    // install that needed a dependency fails instead of finding one in a cache.
    const offline = { npm_config_offline: 'true', npm_config_registry: 'http://127.0.0.1:9/', npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };
    const nodeDir = path.dirname(process.execPath);
    const PATH = `${path.join(prefix, 'bin')}:${nodeDir}:/usr/local/bin:/usr/bin:/bin`;
    const asUser = (file: string, args: string[], env: Record<string, string> = {}) =>
      execa('setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--init-groups', file, ...args], {
        env: { HOME: user.home, USER: user.name, LOGNAME: user.name, PATH, ...env },
        extendEnv: false,
        reject: false,
        timeout: 120_000,
        cwd: user.home,
      });

    const installed = await asUser('npm', ['install', '--global', '--prefix', prefix, tarball], offline);
    expect({ code: installed.exitCode, stderr: installed.stderr }).toMatchObject({ code: 0 });
    expect(installed.stdout).toContain('added 1 package');
    expect(readdirSync(path.join(prefix, 'lib/node_modules/sandboxd'))).not.toContain('node_modules');

    // The user's own agent with a key, as a login shell has.
    const agentSocket = path.join(user.home, 'agent.sock');
    const key = path.join(user.home, 'id_ed25519');
    expect((await asUser('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'packaged@sandboxd', '-f', key])).exitCode).toBe(0);
    expect((await asUser('ssh-agent', ['-a', agentSocket])).exitCode).toBe(0);
    expect((await asUser('ssh-add', [key], { SSH_AUTH_SOCK: agentSocket })).exitCode).toBe(0);

    const run = await asUser('sandboxd', ['run', '--engine', 'podman', '--no-workdir', '--', '--rm', image, 'ssh-add', '-l'], { SSH_AUTH_SOCK: agentSocket });
    expect({ code: run.exitCode, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
    expect(run.stdout).toContain('packaged@sandboxd');
    // The daemon it auto-started runs from the installed package, not from this clone.
    const status = await asUser('sandboxd', ['status', '--json']);
    expect(status.exitCode).toBe(0);
    const { pid } = JSON.parse(status.stdout) as { pid: number };
    expect(readFileSync(`/proc/${String(pid)}/cmdline`, 'utf8').split('\0')).toContain(path.join(prefix, 'bin/sandboxd'));
    await asUser('sandboxd', ['stop']);
  });
});
