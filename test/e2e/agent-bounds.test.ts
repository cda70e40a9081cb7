import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, listSessions, listTunnels, type Session } from '../../dist/client/index.js';
import { SESSION_MAX_OPEN } from '../../daemon/bridges/bounds.js';
import { Cleanup, cli, cliEnv, makeSandbox, startAgent, waitFor, type Agent } from '../helpers.js';
import { buildHolder, HOLDER_IN_CONTAINER } from '../lab/holder.js';
import { startPodmanMachine } from '../lab/podman-machine.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** The user's agent, started with a low fd limit: it serves 90 connections at once and leaves more waiting. */
const AGENT_MAX_FILES = 100;
/** What the hostile container opens and holds: more than the agent can take. */
const HELD = 300;
/** A container that asks the agent in a loop and says each time whether it answered. */
const LOOP = 'while true; do if ssh-add -l >/dev/null 2>&1; then echo ok; else echo lost; fi; sleep 0.3; done';

function podman(env: NodeJS.ProcessEnv, args: string[]) {
  return execa('podman', args, { env, extendEnv: false, reject: false, timeout: 90_000 });
}

/** A detached container from the session's plan; removed at the end. */
async function detached(env: NodeJS.ProcessEnv, session: Session, command: string[]): Promise<{ logs: () => Promise<string> }> {
  const applied = applyPlan(['run', '--detach', '--network', 'none', ...command], session.plan);
  const started = await podman({ ...env, ...applied.spawnEnv }, [...applied.globalArgs, ...applied.args]);
  expect(started.stderr).toBe('');
  const id = started.stdout.trim();
  cleanup.add(() => podman(env, [...applied.globalArgs, 'rm', '-f', '-t', '0', id]));
  return { logs: async () => (await podman(env, [...applied.globalArgs, 'logs', id])).stdout };
}

/** Starts the hostile container and waits until it holds its connections: how many an agent answered. */
async function hold(env: NodeJS.ProcessEnv, image: string, holder: string[], session: Session): Promise<{ answered: number; closed: number }> {
  const container = await detached(env, session, [...holder, '--user', '1000:1000', image, HOLDER_IN_CONTAINER, '/run/sandboxd/ssh/agent.sock', String(HELD), '600']);
  const line = await waitFor(async () => /answered (\d+) closed (\d+)/.exec(await container.logs()), 'the container to hold its connections', 60_000, 200);
  return { answered: Number(line[1]), closed: Number(line[2]) };
}

/** Another session's container lists the agent's keys. */
async function keysIn(env: NodeJS.ProcessEnv, image: string, session: Session): Promise<string> {
  const applied = applyPlan(['run', '--rm', '--network', 'none', '--user', '1000:1000', image, 'ssh-add', '-l'], session.plan);
  const result = await podman({ ...env, ...applied.spawnEnv }, [...applied.globalArgs, ...applied.args]);
  return `${result.stdout}${result.stderr}`;
}

/** The user's own `ssh-add -l` on the host, bounded: an agent out of descriptors leaves it waiting. */
async function userKeys(agent: Agent): Promise<string> {
  const result = await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: agent.socket }, reject: false, timeout: 10_000 });
  return result.timedOut ? 'timed out' : result.stdout;
}

/** The two bridges that run in the daemon: the local relay, and a Podman machine's tunnel (the lab's sshd as the VM). */
type Shape = 'Linux relay' | 'Podman machine tunnel';
const SHAPES: Shape[] = ['Linux relay', 'Podman machine tunnel'];

describe.skipIf(labMissing)('each session\'s agent is bounded and its own (real podman, ssh-agent under a low fd limit)', () => {
  async function setup(shape: Shape) {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup, 'agent', { maxFiles: AGENT_MAX_FILES });
    const holder = buildHolder(sandbox.dir);
    const machine: Record<string, string> = shape === 'Linux relay' ? {} : { CONTAINERS_CONF: await startPodmanMachine(sandbox, podmanEnv, cleanup), SANDBOXD_SSH_BRIDGE: 'tunnel' };
    return { sandbox, podmanEnv, image, agent, holder, env: cliEnv(sandbox, { ...podmanEnv, ...machine, SSH_AUTH_SOCK: agent.socket }) };
  }

  it.each(SHAPES)(`%s: a container holding ${String(HELD)} connections is served ${String(SESSION_MAX_OPEN)}; another session and the user's own ssh-add still answer; sessions ls and tunnels ls count the refusals`, async (shape) => {
    const { env, image, agent, holder } = await setup(shape);
    const attacker = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => attacker.release());
    const held = await hold(env, image, holder, attacker);
    expect(held).toEqual({ answered: SESSION_MAX_OPEN, closed: HELD - SESSION_MAX_OPEN });

    const other = await acquireSession({ engine: 'podman', env, heartbeat: false });
    cleanup.add(() => other.release());
    expect(await keysIn(env, image, other)).toContain(agent.fingerprint);
    expect(await userKeys(agent)).toContain(agent.fingerprint);

    const sessions = await listSessions(env);
    expect(sessions.find((session) => session.id === attacker.id)?.refused).toBe(HELD - SESSION_MAX_OPEN);
    expect(sessions.find((session) => session.id === other.id)?.refused).toBe(0);
    expect(await listTunnels(env)).toEqual([expect.objectContaining({ kind: shape === 'Linux relay' ? 'relay' : 'tunnel', endpoints: 2, open: SESSION_MAX_OPEN, refused: HELD - SESSION_MAX_OPEN })]);
    const table = (await cli(['sessions', 'ls'], env)).stdout;
    expect(table).toMatch(new RegExp(`${attacker.id} .* ${String(HELD - SESSION_MAX_OPEN)} `));
  });

  it.each(SHAPES)('%s: a container whose session was released loses the agent at once, and for good', async (shape) => {
    const { env, image } = await setup(shape);
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false });
    const container = await detached(env, session, [image, 'sh', '-c', LOOP]);
    await waitFor(async () => (await container.logs()).includes('ok'), 'the container to use the agent', 30_000, 200);
    await session.release();
    await waitFor(async () => (await container.logs()).includes('lost'), 'the container to lose the agent', 10_000, 200);
    // Still lost three answers later.
    await waitFor(async () => (await container.logs()).split('\n').filter((line) => line === 'lost').length >= 4, 'more answers', 10_000, 200);
    const after = (await container.logs()).split('\n').filter((line) => line !== '');
    expect(after.slice(after.indexOf('lost'))).not.toContain('ok');
  });
});
