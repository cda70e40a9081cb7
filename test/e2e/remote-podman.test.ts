import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession } from '../../dist/client/index.js';
import { CLI, Cleanup, cli, cliEnv, makeSandbox, startAgent } from '../helpers.js';
import { commitComesHome, plainRepo } from './git-lab.js';
import { labMissing, podmanLab } from './lab.js';
import { startRemoteMachine, startRemoteVm } from './remote-lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface ErrorJson {
  error: { code: string; message: string; remedy: string };
}

/**
 * The shape of a Mac: podman reaches a Podman API service over ssh, and that service,
 * the "VM", sees this host's files except the sandbox's HOME and `hidden/`.
 */
async function remoteLab() {
  const { env: podmanEnv, image } = podmanLab();
  const sandbox = makeSandbox(cleanup);
  const hidden = path.join(sandbox.dir, 'hidden');
  const project = path.join(hidden, 'project');
  mkdirSync(project, { recursive: true });
  writeFileSync(path.join(hidden, 'host-only-marker'), 'on the host\n');
  writeFileSync(path.join(sandbox.home, '.gitconfig'), '[user]\n\tname = Lab User\n');
  const conf = await startRemoteVm(sandbox, [sandbox.home, hidden], cleanup);
  const agent = await startAgent(sandbox.dir, cleanup);
  const env = cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, SSH_AUTH_SOCK: agent.socket });
  return { sandbox, hidden, project, env, agent, image };
}

/** Lists the lab's `hidden/` from inside a container: empty where the container runs in the "VM". */
const LIST_HIDDEN = (sandboxDir: string, image: string): string[] => ['--rm', '--network', 'none', '-v', `${sandboxDir}:/lab:ro`, image, 'ls', '/lab/hidden'];

describe.skipIf(labMissing)('remote Podman over an ssh connection (podman system service as the VM)', () => {
  it.each([
    ['--connection vm', ['--connection', 'vm'], {}],
    ['CONTAINER_CONNECTION=vm', [], { CONTAINER_CONNECTION: 'vm' }],
  ])('%s runs the container through the connection, and the plan says so', async (_name, flags, extraEnv) => {
    const { sandbox, env, image } = await remoteLab();
    const runEnv = { ...env, ...extraEnv };
    const plan = JSON.parse((await cli(['plan', '--engine', 'podman', ...flags, '--json'], runEnv)).stdout) as { plan: { globalArgs: string[] } };
    expect(plan.plan.globalArgs).toEqual(['--connection', 'vm']);
    const remote = await cli(['run', '--quiet', '--engine', 'podman', ...flags, '--', ...LIST_HIDDEN(sandbox.dir, image)], runEnv, 90_000);
    expect(remote.stderr).not.toMatch(/error/i);
    expect(remote.exitCode).toBe(0);
    expect(remote.stdout).not.toContain('host-only-marker');
    // The same container run here, with no connection, sees the host's hidden directory.
    const localEnv = Object.fromEntries(Object.entries(runEnv).filter(([name]) => name !== 'CONTAINER_CONNECTION'));
    const local = await execa('podman', ['run', ...LIST_HIDDEN(sandbox.dir, image)], { env: localEnv, extendEnv: false, reject: false, timeout: 90_000 });
    expect(`${local.stdout}${local.stderr}`).toContain('host-only-marker');
  });

  it('a --user 1000 container lists the key through the tunnel, and no process in the VM shows the agent dir in its argv', async () => {
    const { env, agent, image } = await remoteLab();
    const session = await acquireSession({ engine: 'podman', connection: 'vm', env, heartbeat: false });
    cleanup.add(() => session.release());
    const vmDir = session.plan.mounts.find((mount) => mount.purpose === 'ssh agent')?.source ?? '';
    expect(vmDir).toMatch(/^\/tmp\/sandboxd-[0-9a-f]{16}\/[0-9a-f]{32}\/[0-9a-f]{16}$/);
    // The "VM" is this host: every process's argv is in /proc.
    const leaks = readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .map((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
        } catch {
          return '';
        }
      })
      .filter((line) => line.includes(path.dirname(path.dirname(vmDir))) || line.includes(path.basename(path.dirname(vmDir))) || line.includes(path.basename(vmDir)));
    expect(leaks).toEqual([]);
    const result = await cli(['run', '--quiet', '--engine', 'podman', '--connection', 'vm', '--', '--rm', '--network', 'none', '--user', '1000:1000', image, 'ssh-add', '-l'], env, 90_000);
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.exitCode).toBe(0);
  });

  it('a HOME the VM cannot see drops its git config with a warning, and the run works', async () => {
    const { sandbox, env, image } = await remoteLab();
    const plan = JSON.parse((await cli(['plan', '--engine', 'podman', '--connection', 'vm', '--json'], env)).stdout) as { plan: { warnings: string[]; args: string[] } };
    const gitconfig = path.join(sandbox.home, '.gitconfig');
    expect(plan.plan.warnings).toContain(`skipped the git config mount of ${gitconfig}: the remote host of connection vm, where the container runs, cannot see it`);
    expect(plan.plan.args.join(' ')).not.toContain(gitconfig);
    const result = await cli(['run', '--quiet', '--engine', 'podman', '--connection', 'vm', '--', '--rm', '--network', 'none', image, 'true'], env, 90_000);
    expect(result.exitCode).toBe(0);
  });

  it('a workdir the VM cannot see fails the acquire with MOUNT_NOT_SHARED, not the engine\'s exit 125', async () => {
    const { project, env, image } = await remoteLab();
    const result = await execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--connection', 'vm', '--json', '--', '--rm', image, 'true'], { env, cwd: project, reject: false, timeout: 60_000, extendEnv: false });
    expect(result.exitCode).not.toBe(125);
    const { error } = JSON.parse(result.stdout) as ErrorJson;
    expect(error).toMatchObject({ code: 'MOUNT_NOT_SHARED', message: `the workdir ${project} is not visible to the remote host of connection vm, where the container runs` });
    expect(error.remedy).toContain('remote host');
  });

  it.each([
    ['root', [], '0:0'],
    ['--user 1000', ['--user', '1000'], '1000:1000'],
  ])("%s through the connection: the container in the VM works in the sandbox's own git dir, a commit made there comes home, and a reflog planted as a link writes no host file", async (_name, user, owner) => {
    const { sandbox, env, image } = await remoteLab();
    chmodSync(sandbox.dir, 0o755);
    const dir = await plainRepo(path.join(sandbox.dir, 'src', 'repo'), owner);
    await commitComesHome(dir, path.join(sandbox.dir, 'bashrc'), (script) =>
      execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--connection', 'vm', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', ...user, image, 'sh', '-c', script], { cwd: dir, env, extendEnv: false, reject: false, timeout: 90_000 }),
    );
  });

  it("a sandbox git dir the VM cannot see fails the acquire with MOUNT_NOT_SHARED (it is never left out)", async () => {
    const lab = await remoteLab();
    const dir = await plainRepo(path.join(lab.sandbox.dir, 'src', 'repo'));
    // The state dir, which holds the sandbox git dirs, where the VM sees nothing.
    const env = { ...lab.env, SANDBOXD_STATE_DIR: path.join(lab.hidden, 'state') };
    const hidden = lab.hidden;
    const refused = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--connection', 'vm', '--ssh-agent', 'off', '--json'], { cwd: dir, env, extendEnv: false, reject: false, timeout: 60_000 });
    const { error } = JSON.parse(refused.stdout) as ErrorJson;
    expect(error.code).toBe('MOUNT_NOT_SHARED');
    expect(error.message).toContain(`repository git dir (the sandbox's own) ${path.join(hidden, 'state', 'git-dirs')}`);
  });

  it('a machine connection is judged by the volumes in its config file: MOUNT_NOT_SHARED names the machine and its shares, with no login', async () => {
    const { env: podmanEnv } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const hidden = path.join(sandbox.dir, 'hidden');
    const project = path.join(hidden, 'project');
    mkdirSync(project, { recursive: true });
    const { conf, port } = await startRemoteMachine(sandbox, [hidden], cleanup);
    // Stands in for the config `podman machine init` writes on a Mac (no Podman machine runs here):
    // the lab's sshd is the machine's VM, on the port the config names.
    const xdg = path.join(sandbox.dir, 'xdg');
    const configDir = path.join(xdg, 'containers', 'podman', 'machine', 'applehv');
    mkdirSync(configDir, { recursive: true });
    const writeConfig = (shares: string[]): void => {
      const config = { Name: 'vm', Version: 1, SSH: { Port: port, RemoteUsername: 'root' }, Mounts: shares.map((share) => ({ Source: share, Target: share, ReadOnly: false, Type: 'virtiofs' })) };
      writeFileSync(path.join(configDir, 'vm.json'), JSON.stringify(config));
    };
    const env = cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, XDG_CONFIG_HOME: xdg });
    const plan = (cwd: string) => execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--connection', 'vm', '--ssh-bridge', 'none', '--workdir', '--json'], { env, cwd, reject: false, timeout: 60_000, extendEnv: false });
    writeConfig([sandbox.home]);
    const refused = await plan(project);
    const { error } = JSON.parse(refused.stdout) as ErrorJson;
    expect(error).toMatchObject({ code: 'MOUNT_NOT_SHARED', message: `the workdir ${project} is not visible to the VM of Podman machine connection vm, where the container runs` });
    expect(error.remedy).toContain(`podman machine init --volume ${project}:${project}`);
    expect(error.remedy).toContain(`(it shares ${sandbox.home})`);
    // A machine made sharing the whole sandbox: the config alone decides (the VM itself, asked
    // over ssh, would not find the hidden project), so no login answered the check.
    const other = makeSandbox(cleanup);
    const elsewhere = path.join(other.dir, 'project');
    mkdirSync(elsewhere);
    writeConfig([sandbox.dir, other.dir]);
    const accepted = await plan(project);
    expect(accepted.exitCode, accepted.stdout + accepted.stderr).toBe(0);
  });
});
