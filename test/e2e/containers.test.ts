import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import type { SessionInfo } from '../../shared/contracts/sessions.js';
import { CLI, Cleanup, ROOT, cli, cliEnv, daemonPid, makeSandbox, pidAlive, startAgent, startDaemon, waitFor } from '../helpers.js';
import { ownerLabel } from '../../daemon/composition/containers.js';
import { dockerLabUnavailable, startDockerd, type Dockerd } from '../lab/dockerd.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** The bound for a killed client's container to be gone. */
const REAP_BOUND_MS = 10_000;
/**
 * The start-up look for containers no record names, as the README bounds it: a quiet moment (10 s
 * at most), the stray probe (1 s), then `ps`, `inspect` and `rm -f` (10 s, 10 s and 15 s, each
 * killed 2 s past its bound), with room for a loaded machine.
 */
const UNRECORDED_BOUND_MS = 10_000 + 1_000 + 12_000 + 12_000 + 17_000 + 8_000;

/**
 * kill -9 of the daemon a client auto-started: nobody reaps it here (it was reparented to a pid 1
 * that does not reap), so it lingers as a zombie, as it does under a long-lived parent.
 */
async function killAutoStartedDaemon(env: NodeJS.ProcessEnv): Promise<void> {
  const pid = daemonPid(env as { SANDBOXD_STATE_DIR: string });
  if (pid === null) throw new Error('no auto-started daemon to kill');
  process.kill(pid, 'SIGKILL');
  await waitFor(() => !pidAlive(pid), `daemon ${String(pid)} to die`);
}

/** `sandboxd run` as the user starts it; resolves once the container printed `started`. */
async function spawnRun(env: NodeJS.ProcessEnv, engine: 'podman' | 'docker', args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [CLI, 'run', '--quiet', '--engine', engine, '--ssh-agent', 'off', '--no-workdir', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanup.add(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  await waitFor(() => out.includes('started') || child.exitCode !== null, 'the container to start', 45_000);
  if (!out.includes('started')) throw new Error(`sandboxd run exited ${String(child.exitCode)}: ${out}`);
  return child;
}

describe.skipIf(labMissing)('sessions own their containers (real podman)', () => {
  function setup() {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox, podmanEnv);
    const podman = (args: string[]) => execa('podman', args, { env, reject: false, timeout: 30_000 });
    const track = (id: string) => {
      cleanup.add(() => podman(['rm', '-f', '--time', '0', id]));
    };
    const running = async (id: string) => (await podman(['inspect', '--format', '{{.State.Running}}', id])).stdout === 'true';
    const gone = async (id: string) => (await podman(['container', 'exists', id])).exitCode === 1;
    return { env, image, sandbox, podman, track, running, gone };
  }

  const startRun = (env: NodeJS.ProcessEnv, args: string[]) => spawnRun(env, 'podman', args);

  async function sessions(env: NodeJS.ProcessEnv): Promise<SessionInfo[]> {
    return JSON.parse((await cli(['sessions', 'ls', '--json'], env)).stdout) as SessionInfo[];
  }

  /** The container of the one session whose client is `pid`, once the engine wrote its cidfile. */
  async function containerOf(env: NodeJS.ProcessEnv, pid: number): Promise<{ session: string; id: string }> {
    return waitFor(async () => {
      const found = (await sessions(env)).find((session) => session.clientPid === pid);
      const id = found?.container?.id;
      return found !== undefined && typeof id === 'string' ? { session: found.id, id } : null;
    }, 'the session to show its container');
  }

  it('labels the container, shows it in sessions ls, and removes it within 10 s of `sandboxd run` being SIGKILLed', async () => {
    const { env, image, podman, track, running, gone } = setup();
    await startDaemon(env, cleanup);
    const run = await startRun(env, ['--', '--network', 'none', image, 'sh', '-c', 'echo started; sleep 60']);
    const { session, id } = await containerOf(env, run.pid ?? 0);
    track(id);
    expect(await running(id)).toBe(true);
    const labels = JSON.parse((await podman(['inspect', '--format', '{{json .Config.Labels}}', id])).stdout) as Record<string, string>;
    expect(labels['sandboxd.session']).toBe(session);
    expect(labels['sandboxd.owner']).toMatch(/^[0-9a-f]{16}$/);
    const table = await cli(['sessions', 'ls'], env);
    expect(table.stdout).toContain('CONTAINER');
    expect(table.stdout).toContain(id.slice(0, 12));

    run.kill('SIGKILL');
    await waitFor(() => gone(id), 'the container to be removed', REAP_BOUND_MS, 200);
    expect(await sessions(env)).toEqual([]);
  });

  it('removes the container of a library client that exits without releasing, and leaves a released one running', async () => {
    const { env, image, track, running, gone } = setup();
    await startDaemon(env, cleanup);
    // Two sessions in one client: A is released (its container is the client's), B is not.
    const script = `
      import { execFileSync } from 'node:child_process';
      import { acquireSession, applyPlan } from ${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))};
      const start = async () => {
        const session = await acquireSession({ engine: 'podman', sshAgent: 'off', label: 'lib' });
        const { args, globalArgs } = applyPlan(['run', '-d', '--network', 'none', ${JSON.stringify(image)}, 'sleep', '60'], session.plan);
        return { session, id: execFileSync('podman', [...globalArgs, ...args], { encoding: 'utf8' }).trim() };
      };
      const released = await start();
      const kept = await start();
      await released.session.release();
      console.log(JSON.stringify({ released: released.id, kept: kept.id }));
      process.exit(0);
    `;
    const result = await execa(process.execPath, ['--input-type=module', '-e', script], { env, reject: false, timeout: 60_000 });
    expect(result.stderr).toBe('');
    const ids = JSON.parse(result.stdout) as { released: string; kept: string };
    track(ids.released);
    track(ids.kept);
    await waitFor(() => gone(ids.kept), 'the unreleased session\'s container to be removed', REAP_BOUND_MS, 200);
    // The reaper has run since the release: the released session's container is still there.
    expect(await running(ids.released)).toBe(true);
    expect(await sessions(env)).toEqual([]);
  });

  it('`sandboxd sessions rm ID` ends the session and removes its container', async () => {
    const { env, image, track, gone } = setup();
    await startDaemon(env, cleanup);
    const run = await startRun(env, ['--', '--network', 'none', image, 'sh', '-c', 'echo started; sleep 60']);
    const { session, id } = await containerOf(env, run.pid ?? 0);
    track(id);
    const removed = await cli(['sessions', 'rm', session, '--json'], env);
    expect(JSON.parse(removed.stdout)).toEqual({ removed: true, id: session, containers: [id] });
    expect(await gone(id)).toBe(true);
    const again = await cli(['sessions', 'rm', session], env);
    expect(again.exitCode).toBe(1);
    expect(again.stderr).toContain(`sandboxd: no session ${session}`);
  });

  it('a daemon started after a kill -9 removes the container of a client that died meanwhile, and no other', async () => {
    const { env, image, podman, track, running, gone } = setup();
    // The first daemon is auto-started by `sandboxd run`, as users' clients start it.
    const run = await startRun(env, ['--', '--network', 'none', image, 'sh', '-c', 'echo started; sleep 60']);
    const { session, id } = await containerOf(env, run.pid ?? 0);
    track(id);
    // Same session label, another daemon's (or user's) owner label: not ours to remove.
    const foreign = (await podman(['run', '-d', '--network', 'none', '--label', `sandboxd.session=${session}`, '--label', 'sandboxd.owner=0000000000000000', image, 'sleep', '60'])).stdout.trim();
    track(foreign);
    const bystander = (await podman(['run', '-d', '--network', 'none', image, 'sleep', '60'])).stdout.trim();
    track(bystander);

    await killAutoStartedDaemon(env);
    run.kill('SIGKILL');
    // The next daemon, started as a user would; its environment is the minimal one auto-start gives.
    expect((await cli(['start'], env)).exitCode).toBe(0);
    await waitFor(() => gone(id), 'the orphan container to be removed', REAP_BOUND_MS, 200);
    expect(await running(foreign)).toBe(true);
    expect(await running(bystander)).toBe(true);
  });

  it('a full state dir fails the acquire with STATE_WRITE_FAILED, leaving no record and no container', async () => {
    const { env, image, sandbox, podman } = setup();
    // A real full filesystem as the state dir: the daemon starts on it, then it fills up.
    const state = sandbox.env.SANDBOXD_STATE_DIR;
    mkdirSync(state, { recursive: true, mode: 0o700 });
    await execa('mount', ['-t', 'tmpfs', '-o', 'size=256k,mode=0700', 'tmpfs', state]);
    cleanup.add(() => execa('umount', ['-l', state], { reject: false }));
    await startDaemon(env, cleanup);
    const fill = path.join(state, 'fill');
    await execa('dd', ['if=/dev/zero', `of=${fill}`, 'bs=4k'], { reject: false });
    const owner = ownerLabel(process.getuid?.() ?? 0, state);

    const run = await execa(process.execPath, [CLI, 'run', '--engine', 'podman', '--ssh-agent', 'off', '--no-workdir', '--', '--network', 'none', image, 'true'], { env, reject: false, timeout: 60_000 });
    expect(run.exitCode).toBe(1);
    // Whichever the acquire wrote first: the container's record, or the sandbox's git dir for this repository.
    expect(run.stderr).toMatch(/^sandboxd: cannot (record the session's container|make the sandbox's git dir) in .*: ENOSPC: no space left on device/);
    expect(run.stderr).toContain('no plan was handed out');
    expect((await podman(['ps', '-a', '-q', '--filter', `label=sandboxd.owner=${owner}`])).stdout).toBe('');
    const records = existsSync(path.join(state, 'containers')) ? readdirSync(path.join(state, 'containers')) : [];
    expect(records).toEqual([]);

    // With room again, the same command works.
    rmSync(fill);
    const again = await execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--no-workdir', '--', '--rm', '--network', 'none', image, 'true'], { env, reject: false, timeout: 60_000 });
    expect({ code: again.exitCode, stderr: again.stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('a daemon started after a kill -9 removes a container carrying its owner label that no record names, and no other', async () => {
    const { env, image, sandbox, podman, track, running, gone } = setup();
    const owner = ownerLabel(process.getuid?.() ?? 0, sandbox.env.SANDBOXD_STATE_DIR);
    // A session released at once (`plan`): its container, started afterwards, is the client's.
    const planned = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], env, 60_000);
    expect(planned.exitCode, planned.stderr).toBe(0);
    const plan = JSON.parse(planned.stdout) as { session: { id: string }; plan: { args: string[] } };
    const start = async (args: string[]): Promise<string> => {
      const id = (await podman(['run', '-d', '--network', 'none', ...args, image, 'sleep', '60'])).stdout.trim();
      track(id);
      return id;
    };
    const released = await start(plan.plan.args);
    // The containers below are started once the daemon that handed out the plan is dead: its own
    // look for containers no record names comes at a quiet moment after its start, and would find
    // them first (and a kill -9 during its `rm -f` would leave the removal unlogged).
    await killAutoStartedDaemon(env);
    // What a daemon that lost a record (a write a full disk refused, before the fix) left running.
    const unrecorded = await start(['--label', 'sandboxd.session=ses_neverrecorded1', '--label', `sandboxd.owner=${owner}`]);
    const foreign = await start(['--label', 'sandboxd.session=ses_neverrecorded1', '--label', 'sandboxd.owner=0000000000000000']);
    // A helper (a relay) of this daemon: no session label, not a session container.
    const helper = await start(['--label', `sandboxd.owner=${owner}`]);

    expect((await cli(['start'], env)).exitCode).toBe(0);
    const pid = daemonPid(env as { SANDBOXD_STATE_DIR: string });
    const log = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
    const removal = 'removed containers of this daemon that no record names';
    // The line comes once `rm -f` returned, a moment after the engine stopped listing the container.
    const line = await waitFor(
      () => readFileSync(log, 'utf8').split('\n').find((entry) => entry.includes(`"msg":"${removal}"`)),
      'the removal of the unrecorded container to be logged',
      UNRECORDED_BOUND_MS,
      200,
    );
    const { pid: by, containers, sessions } = JSON.parse(line) as { pid: number; containers: string[]; sessions: string[] };
    expect({ by, containers, sessions }).toEqual({ by: pid, containers: [unrecorded], sessions: ['ses_neverrecorded1'] });
    expect(await gone(unrecorded)).toBe(true);
    for (const id of [released, foreign, helper]) expect(await running(id)).toBe(true);
  }, 180_000);

  it('a client that outlives a killed daemon keeps its container under its renewed lease until it dies', async () => {
    const { env, image, track, running, gone } = setup();
    const first = await startDaemon(env, cleanup, ['--lease-ttl', '3']);
    const script = `
      import { execFileSync } from 'node:child_process';
      import { acquireSession, applyPlan } from ${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))};
      const session = await acquireSession({ engine: 'podman', sshAgent: 'off', label: 'survivor' });
      const { args, globalArgs } = applyPlan(['run', '-d', '--network', 'none', ${JSON.stringify(image)}, 'sleep', '60'], session.plan);
      console.log(execFileSync('podman', [...globalArgs, ...args], { encoding: 'utf8' }).trim());
      setInterval(() => undefined, 1000);
    `;
    const client = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    cleanup.add(() => client.kill('SIGKILL'));
    let out = '';
    client.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const id = await waitFor(() => /^[0-9a-f]{64}$/m.exec(out)?.[0], 'the library client to start its container', 45_000);
    track(id);

    first.child.kill('SIGKILL');
    await waitFor(() => first.child.exitCode !== null || first.child.signalCode !== null, 'the first daemon to die');
    await startDaemon(env, cleanup, ['--lease-ttl', '3']);
    // The client renews its lease with the new daemon, which hands it the recorded container.
    await waitFor(async () => (await sessions(env)).find((session) => session.clientPid === client.pid)?.container?.id === id, 'the renewed lease to own the container', 20_000, 200);
    expect(await running(id)).toBe(true);
    client.kill('SIGKILL');
    await waitFor(() => gone(id), 'the container to be removed', REAP_BOUND_MS, 200);
  });

  it('--harden makes the root filesystem read-only while the work tree stays writable and the agent works', async () => {
    const { env, image, sandbox } = setup();
    const agent = await startAgent(sandbox.dir, cleanup);
    const work = path.join(sandbox.dir, 'work');
    mkdirSync(work);
    const script = [
      'ssh-add -l',
      'touch /planted 2>/dev/null && echo root=writable || echo root=readonly',
      'touch /tmp/scratch && echo tmp=writable',
      'touch ./made-inside && echo work=writable',
      'grep -E "^(CapEff|NoNewPrivs)" /proc/self/status',
    ].join('; ');
    const result = await execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'on', '--harden', '--', '--rm', '--network', 'none', image, 'sh', '-c', script], {
      env: { ...env, SSH_AUTH_SOCK: agent.socket },
      cwd: work,
      reject: false,
      timeout: 60_000,
    });
    expect(result.stdout).toContain(agent.fingerprint);
    expect(result.stdout).toContain('root=readonly');
    expect(result.stdout).toContain('tmp=writable');
    expect(result.stdout).toContain('work=writable');
    expect(result.stdout).toMatch(/CapEff:\s+0+\n/);
    expect(result.stdout).toMatch(/NoNewPrivs:\s+1/);
    expect(result.exitCode).toBe(0);
    expect(existsSync(path.join(realpathSync(work), 'made-inside'))).toBe(true);
  });
});

const dockerMissing = dockerLabUnavailable(lab) !== null && process.env.CI === undefined;

describe.skipIf(dockerMissing)('sessions own their containers (real Docker Engine)', () => {
  const engineCleanup = new Cleanup();
  let dockerd: Dockerd;
  beforeAll(async () => {
    dockerd = await startDockerd('containers', lab, engineCleanup);
  }, 180_000);
  afterAll(() => engineCleanup.run(), 120_000);

  function setup() {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox, { DOCKER_HOST: dockerd.host });
    const gone = async (id: string) => (await dockerd.docker(['inspect', id])).exitCode !== 0;
    const running = async (id: string) => (await dockerd.docker(['inspect', '--format', '{{.State.Running}}', id])).stdout === 'true';
    return { env, sandbox, gone, running };
  }

  async function startRun(env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; id: string; session: string }> {
    const child = await spawnRun(env, 'docker', ['--', '--network', 'none', dockerd.image, 'sh', '-c', 'echo started; sleep 60']);
    const found = await waitFor(async () => {
      const listed = JSON.parse((await cli(['sessions', 'ls', '--json'], env)).stdout) as SessionInfo[];
      const mine = listed.find((session) => session.clientPid === child.pid);
      return typeof mine?.container?.id === 'string' ? { id: mine.container.id, session: mine.id } : null;
    }, 'the session to show its container');
    cleanup.add(() => dockerd.docker(['rm', '-f', found.id]));
    return { child, ...found };
  }

  it('removes the container within 10 s of `sandboxd run` being SIGKILLed', async () => {
    const { env, gone, running } = setup();
    await startDaemon(env, cleanup);
    const run = await startRun(env);
    expect(await running(run.id)).toBe(true);
    expect((await dockerd.docker(['inspect', '--format', '{{index .Config.Labels "sandboxd.session"}}', run.id])).stdout).toBe(run.session);
    run.child.kill('SIGKILL');
    await waitFor(() => gone(run.id), 'the container to be removed', REAP_BOUND_MS, 200);
  });

  it('a daemon started after a kill -9 removes the container of a client that died meanwhile, and no other', async () => {
    const { env, gone, running } = setup();
    // Auto-started by `sandboxd run`, as users' clients start it.
    const run = await startRun(env);
    const foreign = (await dockerd.docker(['run', '-d', '--network', 'none', '--label', `sandboxd.session=${run.session}`, '--label', 'sandboxd.owner=0000000000000000', dockerd.image, 'sleep', '60'])).stdout.trim();
    cleanup.add(() => dockerd.docker(['rm', '-f', foreign]));
    await killAutoStartedDaemon(env);
    run.child.kill('SIGKILL');
    expect((await cli(['start'], env)).exitCode).toBe(0);
    await waitFor(() => gone(run.id), 'the orphan container to be removed', REAP_BOUND_MS, 200);
    expect(await running(foreign)).toBe(true);
  });

  it('--harden makes the root filesystem read-only while the work tree stays writable', async () => {
    const { env, sandbox } = setup();
    const work = path.join(sandbox.dir, 'work');
    mkdirSync(work);
    const script = 'touch /planted 2>/dev/null && echo root=writable || echo root=readonly; touch /tmp/scratch && echo tmp=writable; touch ./made-inside && echo work=writable';
    const result = await execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'docker', '--ssh-agent', 'off', '--harden', '--', '--rm', '--network', 'none', dockerd.image, 'sh', '-c', script], {
      env,
      cwd: work,
      reject: false,
      timeout: 60_000,
    });
    expect(result.stdout).toBe('root=readonly\ntmp=writable\nwork=writable');
    expect(result.exitCode).toBe(0);
    expect(existsSync(path.join(realpathSync(work), 'made-inside'))).toBe(true);
  });
});
