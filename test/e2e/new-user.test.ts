import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cleanup, exitOf, pidAlive, waitFor } from '../helpers.js';
import { createTestUser, labImageTar, packTarball, type TestUser } from '../lab/test-user.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run(), 120_000);

/** The tarball `npm pack` makes, once for the file: what a person installs. */
let tarball = '';

beforeAll(async () => {
  if (!labMissing) tarball = await packTarball(cleanup);
}, 180_000);

/** What a finished command said. */
interface Ran {
  exitCode: number | undefined;
  stdout: string;
  stderr: string;
}

type RunOptions = { env?: Record<string, string>; cwd?: string; timeout?: number };

interface Installed {
  user: TestUser;
  image: string;
  /** The work tree: a git repository in the user's home. */
  project: string;
  /** The user's own agent, holding ~/.ssh/id_ed25519. */
  agentSocket: string;
  /** The environment of the user's login shell (the package's bin dir on PATH). */
  env: Record<string, string>;
  /** Runs a program as the user in that shell, in `cwd` (default: the project). */
  as: (file: string, args: readonly string[], options?: RunOptions) => Promise<Ran>;
  /** `sandboxd <args>` from the installed package. */
  sandboxd: (args: readonly string[], options?: RunOptions) => Promise<Ran>;
  /** Containers of this user's podman carrying sandboxd's owner label, with their state. */
  containers: () => Promise<string[]>;
}

/**
 * A new non-root account with rootless Podman (its own config: vfs storage, runc, no network
 * namespace unless `defaultNetwork`), the package installed as the README says (a user prefix,
 * `npm install -g` of the tarball), an agent of its own with a key, and a project repository.
 */
async function installedUser(options: { defaultNetwork?: boolean } = {}): Promise<Installed> {
  const { image } = podmanLab();
  const user = await createTestUser(cleanup, { tar: await labImageTar(lab.dir, cleanup), name: image });
  if (options.defaultNetwork === true) {
    // The user's podman as installed: rootless networking (slirp4netns) for every container.
    const conf = path.join(user.home, '.config/containers/containers.conf');
    writeFileSync(conf, readFileSync(conf, 'utf8').replace('netns = "none"\n', ''));
  }
  const prefix = path.join(user.home, '.local');
  const env: Record<string, string> = {
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    SHELL: '/bin/sh',
    XDG_RUNTIME_DIR: user.runtimeDir,
    PATH: `${path.join(prefix, 'bin')}:${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    npm_config_offline: 'true',
    npm_config_registry: 'http://127.0.0.1:9/',
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
  };
  const project = path.join(user.home, 'project');
  const as: Installed['as'] = async (file, args, run = {}) => {
    const result = await execa('setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--init-groups', file, ...args], {
      env: { ...env, ...run.env },
      extendEnv: false,
      reject: false,
      timeout: run.timeout ?? 120_000,
      cwd: run.cwd ?? (existsSync(project) ? project : user.home),
    });
    return { exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr };
  };
  // The README's set-up: a user prefix, then the package.
  expect((await as('npm', ['config', 'set', 'prefix', prefix])).exitCode).toBe(0);
  const installed = await as('npm', ['install', '--global', tarball]);
  expect({ code: installed.exitCode, stderr: installed.stderr }).toMatchObject({ code: 0 });
  const agentSocket = path.join(user.home, 'agent.sock');
  expect((await as('sh', ['-c', `mkdir -p -m 700 ~/.ssh && ssh-keygen -q -t ed25519 -N '' -C newuser@sandboxd -f ~/.ssh/id_ed25519 && ssh-agent -a ${agentSocket} >/dev/null && SSH_AUTH_SOCK=${agentSocket} ssh-add -q ~/.ssh/id_ed25519`])).exitCode).toBe(0);
  const init = await as('sh', ['-c', `git init -q ${project} && cd ${project} && git config --global user.name 'New User' && git config --global user.email new@example.com && echo one > one.txt && git add one.txt && git commit -qm one`]);
  expect({ code: init.exitCode, stderr: init.stderr }).toEqual({ code: 0, stderr: '' });
  const sandboxd: Installed['sandboxd'] = (args, run = {}) => as(path.join(prefix, 'bin/sandboxd'), args, { ...run, env: { SSH_AUTH_SOCK: agentSocket, ...run.env } });
  const containers = async (): Promise<string[]> => {
    const listed = await as('podman', ['ps', '-a', '--filter', 'label=sandboxd.owner', '--format', 'json']);
    return (JSON.parse(listed.stdout || '[]') as { Id: string; State: string }[]).map((container) => `${container.Id.slice(0, 12)} ${container.State}`);
  };
  return { user, image, project, agentSocket, env, as, sandboxd, containers };
}

/** pids of this user's processes whose command line names sandboxd (daemons, clients, helpers). */
function sandboxdProcesses(user: TestUser): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (statSync(`/proc/${entry}`).uid !== user.uid || !pidAlive(Number(entry))) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('sandboxd')) found.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return found;
}

/** The `sandboxd run` client among them: the node process, not the shell or `script` around it. */
function runClient(user: TestUser): number | null {
  return (
    sandboxdProcesses(user).find((pid) => {
      const argv = readFileSync(`/proc/${String(pid)}/cmdline`, 'utf8').split('\0');
      return argv.some((arg) => arg.endsWith('/bin/sandboxd')) && argv.includes('run') && !argv[0]?.endsWith('script');
    }) ?? null
  );
}

describe.skipIf(labMissing)('the everyday run, as a new user meets it (rootless Podman, the package installed as the README says)', () => {
  let it1: Installed;
  beforeAll(async () => {
    it1 = await installedUser();
  }, 300_000);

  it('`--user 1000` writes and commits in the work tree, and a clean run prints nothing on stderr', async () => {
    const { sandboxd, image, project, as, user } = it1;
    const run = await sandboxd(['run', '--', '--rm', '--user', '1000', image, 'sh', '-c', 'id -u && echo two > two.txt && git add two.txt && git commit -qm two && echo committed']);
    expect({ code: run.exitCode, stdout: run.stdout, stderr: run.stderr }).toEqual({ code: 0, stdout: '1000\ncommitted', stderr: '' });
    // Owned by the user on the host, and the commit is the repository's.
    expect(statSync(path.join(project, 'two.txt')).uid).toBe(user.uid);
    await waitFor(async () => (await as('git', ['log', '--format=%s'])).stdout === 'two\none', 'the sandbox commit on the host branch', 30_000);
    // What sandboxd set for it needs no action: said with -v only.
    const verbose = await sandboxd(['run', '-v', '--', '--rm', '--user', '1000', image, 'true']);
    expect(verbose.exitCode).toBe(0);
    expect(verbose.stderr).toContain(`sandboxd: notice: podman: you (uid ${String(user.uid)}) are uid 1000 in the container (--userns=keep-id:uid=1000,gid=1000), so it writes the work tree as you`);
    expect(verbose.stderr).toContain('sandboxd: notice: git: safe.directory is set to');
    expect(verbose.stderr).not.toContain('warning');
  }, 180_000);

  it('SIGINT to a `-it` run under a pseudo-terminal leaves no running container and no session', async () => {
    const { sandboxd, image, user, env, project, containers } = it1;
    const shell = spawn('setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--init-groups', 'script', '-qfec', `sandboxd run -- --rm -it ${image} sh -c 'echo started; sleep 300'`, '/dev/null'], {
      env: { ...env, SSH_AUTH_SOCK: it1.agentSocket },
      cwd: project,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    cleanup.add(() => shell.kill('SIGKILL'));
    let out = '';
    shell.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('started'), 'the container to start under the terminal', 90_000);
    expect(await containers()).toEqual([expect.stringMatching(/ running$/)]);
    const client = runClient(user);
    expect(client).not.toBeNull();
    process.kill(client ?? 0, 'SIGINT');
    await waitFor(() => !pidAlive(client ?? 0), 'sandboxd run to end after SIGINT', 60_000);
    await exitOf(shell, 30_000);
    expect(await containers()).toEqual([]);
    expect((await sandboxd(['sessions', 'ls'])).stdout).toBe('no sessions');
  }, 180_000);

  it('a second signal makes run stop and remove the container itself, before it releases the session', async () => {
    const { image, user, env, project, containers, sandboxd } = it1;
    // PID 1 in the container ignores SIGINT and SIGTERM: the first one, forwarded, changes nothing.
    const child = spawn('setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--init-groups', path.join(user.home, '.local/bin/sandboxd'), 'run', '-q', '--', '--rm', image, 'sh', '-c', 'echo started; exec sleep 300'], {
      env: { ...env, SSH_AUTH_SOCK: it1.agentSocket },
      cwd: project,
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own session, with no terminal: every signal it gets was sent to it alone.
      detached: true,
    });
    cleanup.add(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('started'), 'the container to start', 90_000);
    // The first goes to podman, which passes it to the container, which ignores it: run waits on.
    // The second is the caller wanting out now. (Two of one kind sent at once are one signal to
    // the kernel: a SIGTERM and a SIGINT are two.)
    child.kill('SIGTERM');
    child.kill('SIGINT');
    const ended = await exitOf(child, 60_000);
    // It ends as the second signal would have ended it, with nothing of the run left.
    expect(ended.code).toBeNull();
    expect(['SIGINT', 'SIGTERM']).toContain(ended.signal);
    expect(await containers()).toEqual([]);
    expect((await sandboxd(['sessions', 'ls'])).stdout).toBe('no sessions');
  }, 180_000);

  it('a container left created or exited is removed once its session is gone; -d is refused', async () => {
    const { sandboxd, image, containers } = it1;
    // No --rm: the container has exited when the run ends, and goes with the session.
    const kept = await sandboxd(['run', '-q', '--', image, 'true']);
    expect(kept.exitCode).toBe(0);
    await waitFor(async () => (await containers()).length === 0, 'the exited container to be removed', 30_000);
    const detached = await sandboxd(['run', '--', '-d', image, 'sleep', '30']);
    expect({ code: detached.exitCode, stdout: detached.stdout }).toEqual({ code: 2, stdout: '' });
    expect(detached.stderr).toContain('cannot detach (-d)');
    expect(await containers()).toEqual([]);
  }, 180_000);

  it('each warning\'s remedy, pasted into the shell, makes the run work as the warning said', async () => {
    const { sandboxd, image, as, project, user } = it1;
    const noAgent = { SSH_AUTH_SOCK: '' };
    const skipped = await sandboxd(['run', '--', '--rm', image, 'true'], { env: noAgent });
    const [reason = '', remedy = ''] = skipped.stderr.split('\n');
    expect(reason).toBe('sandboxd: ssh agent not forwarded: SSH_AUTH_SOCK is not set in the client environment');
    const commands = [...remedy.matchAll(/`([^`]+)`/g)].map((match) => match[1] ?? '');
    expect(commands).toEqual(['eval "$(ssh-agent -s)" && ssh-add', '--ssh-agent off']);
    // The first, pasted in a shell without an agent: the run after it forwards one, and says nothing.
    const sandboxdBin = path.join(user.home, '.local/bin/sandboxd');
    const pasted = await as('sh', ['-c', `unset SSH_AUTH_SOCK; { ${commands[0] ?? ''}; } >/dev/null 2>&1; ${sandboxdBin} run -- --rm ${image} ssh-add -l; code=$?; kill "$SSH_AGENT_PID"; exit $code`]);
    expect({ code: pasted.exitCode, stderr: pasted.stderr }).toEqual({ code: 0, stderr: '' });
    expect(pasted.stdout).toContain('newuser@sandboxd');
    // The second, pasted among sandboxd's options.
    const off = await sandboxd(['run', commands[1]?.split(' ')[0] ?? '', commands[1]?.split(' ')[1] ?? '', '--', '--rm', image, 'true'], { env: noAgent });
    expect({ code: off.exitCode, stderr: off.stderr }).toEqual({ code: 0, stderr: '' });

    // An agent without keys: `ssh-add` adds the user's.
    const empty = path.join(user.home, 'empty-agent.sock');
    await as('ssh-agent', ['-a', empty]);
    const noKeys = await sandboxd(['run', '--', '--rm', image, 'true'], { env: { SSH_AUTH_SOCK: empty } });
    expect(noKeys.stderr).toContain('holds no keys, so the sandbox can authenticate with none: add one with `ssh-add`');
    expect((await as('ssh-add', ['-q'], { env: { SSH_AUTH_SOCK: empty } })).exitCode).toBe(0);
    expect((await sandboxd(['run', '--', '--rm', image, 'true'], { env: { SSH_AUTH_SOCK: empty } })).stderr).toBe('');

    // A podman older than 4.3 (a stand-in that says so and runs the real one) cannot map the user:
    // the warning's run arguments, pasted, make the work tree writable.
    const old = path.join(user.home, 'old-podman');
    await as('sh', ['-c', `mkdir -p ${old} && printf '#!/bin/sh\\n[ "$1" = --version ] && { echo "podman version 4.2.0"; exit 0; }\\nexec /usr/bin/podman "$@"\\n' > ${old}/podman && chmod 755 ${old}/podman`]);
    const oldEnv = { PATH: `${old}:${it1.env.PATH ?? ''}` };
    const warned = await sandboxd(['run', '--', '--rm', '--user', '1000', image, 'sh', '-c', 'touch from-1000 2>/dev/null && echo wrote || echo denied'], { env: oldEnv });
    expect(warned.stdout).toBe('denied');
    const fix = /run as yourself: `([^`]+)`/.exec(warned.stderr)?.[1] ?? '';
    expect(fix).toBe(`--userns=keep-id --user ${String(user.uid)}`);
    const fixed = await sandboxd(['run', '--', '--rm', '--user', '1000', ...fix.split(' '), image, 'sh', '-c', 'touch from-fix && echo wrote'], { env: oldEnv });
    expect({ code: fixed.exitCode, stdout: fixed.stdout, stderr: fixed.stderr }).toEqual({ code: 0, stdout: 'wrote', stderr: '' });
    expect(statSync(path.join(project, 'from-fix')).uid).toBe(user.uid);
  }, 180_000);

  it('smaller: run options without `--` are hinted at; a malformed session id is named; plan shows the work tree run adds', async () => {
    const { sandboxd, image, project } = it1;
    const noDashes = await sandboxd(['run', '--rm', image]);
    expect({ code: noDashes.exitCode, stderr: noDashes.stderr }).toEqual({
      code: 2,
      stderr: "sandboxd: unknown option '--rm' (the engine's run arguments go after `--`: sandboxd run [options] -- --rm -it IMAGE)\n  see 'sandboxd run --help'",
    });
    const nope = await sandboxd(['sessions', 'rm', 'nope']);
    expect(nope.stderr.split('\n')[0]).toBe('sandboxd: the session id "nope" is not in the form sandboxd expects');
    const plan = await sandboxd(['plan']);
    expect(plan.stdout).toContain(`  ${project} -> ${project}  [workdir]`);
    expect(plan.stdout).toContain('notice: git: safe.directory is set to');
  }, 180_000);

  it('`uninstall --purge` leaves no process, container, image, unit or directory of sandboxd\'s; then npm uninstall removes the rest', async () => {
    const { sandboxd, image, as, user, containers } = it1;
    // Something of sandboxd's on the engine: a daemon, a session's container never started (as an
    // interrupted run leaves it), sandboxd's own image (doctor's test container).
    expect((await sandboxd(['doctor'])).stdout).toContain('✓ container: podman started one');
    const plan = JSON.parse((await sandboxd(['plan', '--json'])).stdout) as { plan: { args: string[] } };
    const labels = plan.plan.args.flatMap((arg, index) => (plan.plan.args[index - 1] === '--label' ? [arg] : []));
    const created = await as('podman', ['create', ...labels.flatMap((label) => ['--label', label]), image, 'true']);
    expect(created.exitCode).toBe(0);
    expect(await containers()).toContain(`${created.stdout.slice(0, 12)} created`);
    expect(sandboxdProcesses(user).length).toBeGreaterThan(0);

    const purge = await sandboxd(['uninstall', '--purge']);
    expect(purge.exitCode).toBe(0);
    expect(purge.stdout).toContain('now remove the package: npm uninstall -g sandboxd');
    await waitFor(() => sandboxdProcesses(user).length === 0, 'no process of sandboxd\'s', 15_000);
    expect(await containers()).toEqual([]);
    expect((await as('podman', ['images', '-q', '--filter', 'reference=sandboxd-relay'])).stdout).toBe('');
    expect(existsSync(path.join(user.home, '.local/state/sandboxd'))).toBe(false);
    expect(existsSync(path.join(user.home, '.config/systemd/user/sandboxd.service'))).toBe(false);
    expect(existsSync(path.join(user.runtimeDir, 'sandboxd'))).toBe(false);

    const removed = await as('npm', ['uninstall', '--global', 'sandboxd']);
    expect(removed.exitCode).toBe(0);
    expect(existsSync(path.join(user.home, '.local/bin/sandboxd'))).toBe(false);
    expect(existsSync(path.join(user.home, '.local/lib/node_modules/sandboxd'))).toBe(false);
  }, 180_000);
});

describe.skipIf(labMissing)('doctor answers whether a run would work here', () => {
  it('fails where no container can start with the default network, and names why', async () => {
    const broken = await installedUser({ defaultNetwork: true });
    const doctor = await broken.sandboxd(['doctor', '--json']);
    expect(doctor.exitCode).toBe(1);
    const checks = (JSON.parse(doctor.stdout) as { checks: { name: string; state: string; detail: string; remedy: string | null }[] }).checks;
    const container = checks.find((check) => check.name === 'container');
    expect(container).toMatchObject({ state: 'fail', detail: expect.stringMatching(/^podman starts containers with no network, but not with its default network: .*(slirp4netns|pasta|tun)/) as string });
    expect(container?.remedy).toContain('netns = "none"');
    // Each thing once: the engine line does not say it again.
    expect(checks.filter((check) => check.state === 'fail').map((check) => check.name)).toEqual(['container']);
    // The run doctor said would fail does fail, for that reason.
    const run = await broken.sandboxd(['run', '-q', '--', '--rm', broken.image, 'true']);
    expect(run.exitCode).not.toBe(0);
    expect(run.stderr).toMatch(/slirp4netns|pasta|tun/);

    // No Docker daemon behind docker: named, with the remedy for a Linux host.
    const docker = await broken.sandboxd(['doctor', '--json'], { env: { SANDBOXD_ENGINE: 'docker', DOCKER_HOST: 'unix:///run/sbx-no-docker-here.sock' } });
    const dockerChecks = (JSON.parse(docker.stdout) as { checks: { name: string; state: string; detail: string; remedy: string | null }[] }).checks;
    expect(dockerChecks.find((check) => check.name === 'container')).toMatchObject({
      state: 'fail',
      detail: expect.stringContaining("docker's server does not answer: Cannot connect to the Docker daemon at unix:///run/sbx-no-docker-here.sock") as string,
      remedy: expect.stringContaining('sudo systemctl start docker') as string,
    });
  }, 180_000);
});
