import { readdirSync, renameSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, listTunnels, type Session } from '../../dist/client/index.js';
import { Cleanup, cliEnv, makeSandbox, startAgent, waitFor } from '../helpers.js';
import { startPodmanMachine } from '../lab/podman-machine.js';
import { ATTACK, ATTACKER_TOOLS } from './agent-attack.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const DIRS = ['/run/sandboxd/ssh', '/run/sandboxd/sockets/extra'];
const VICTIM = 'ssh-add -l; SSH_AUTH_SOCK="$EXTRA_SOCKET" ssh-add -l';

function podman(env: NodeJS.ProcessEnv, args: string[]) {
  return execa('podman', args, { env, extendEnv: false, reject: false, timeout: 90_000 });
}

/** Starts the attacker's container from its own session's plan; resolves with what it managed. */
async function attack(env: NodeJS.ProcessEnv, image: string, session: Session): Promise<string> {
  const applied = applyPlan(['run', '--detach', '--network', 'none', ...ATTACKER_TOOLS, image, 'sh', '-c', ATTACK, 'attack', ...DIRS], session.plan);
  const started = await podman({ ...env, ...applied.spawnEnv }, [...applied.globalArgs, ...applied.args]);
  expect(started.stderr).toBe('');
  const id = started.stdout.trim();
  cleanup.add(() => podman(env, [...applied.globalArgs, 'rm', '-f', '-t', '0', id]));
  return waitFor(async () => {
    const logs = await podman(env, [...applied.globalArgs, 'logs', id]);
    return logs.stdout.includes('attacked') ? logs.stdout : null;
  }, 'the attack to finish', 30_000, 200);
}

/**
 * Another sandbox, with a session of its own, asks its agent and its extra socket for their keys:
 * one line each, and what went to stderr after them, if anything.
 */
async function keysSeen(env: NodeJS.ProcessEnv, image: string, session: Session): Promise<string[]> {
  const applied = applyPlan(['run', '--rm', '--network', 'none', '--user', '1000:1000', image, 'sh', '-c', VICTIM], session.plan);
  const result = await podman({ ...env, ...applied.spawnEnv }, [...applied.globalArgs, ...applied.args]);
  return [...result.stdout.split('\n'), ...(result.stderr === '' ? [] : [result.stderr])];
}

describe.skipIf(labMissing)('each session\'s agent is its own: a container cannot change what another container\'s bridge serves (real podman, agents, sshd)', () => {
  async function setup() {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const extra = await startAgent(sandbox.dir, cleanup, 'extra');
    const sockets = [{ name: 'extra', hostPath: extra.socket, env: 'EXTRA_SOCKET' }];
    // What a container that reaches the real agent and the real extra socket lists.
    const realKeys = [expect.stringContaining(agent.fingerprint) as string, expect.stringContaining(extra.fingerprint) as string];
    return { sandbox, podmanEnv, image, agent, sockets, realKeys, env: cliEnv(sandbox, { ...podmanEnv, SSH_AUTH_SOCK: agent.socket }) };
  }

  it('Linux relay: the relay directories are read-only in every container; another session still gets the real keys', async () => {
    const { env, image, sockets, realKeys } = await setup();
    const attacker = await acquireSession({ engine: 'podman', env, heartbeat: false, sockets });
    cleanup.add(() => attacker.release());
    expect(attacker.plan.mounts.filter((mount) => mount.purpose === 'ssh agent' || mount.purpose === 'socket extra')).toEqual([
      expect.objectContaining({ target: '/run/sandboxd/ssh', readOnly: true }),
      expect.objectContaining({ target: '/run/sandboxd/sockets/extra', readOnly: true }),
    ]);
    const attempted = await attack(env, image, attacker);

    const other = await acquireSession({ engine: 'podman', env, heartbeat: false, sockets });
    cleanup.add(() => other.release());
    expect(await keysSeen(env, image, other)).toEqual(realKeys);
    expect(attempted).toBe('attacked');
    // Nothing was added to the user's runtime dir either: each session's directory holds its socket alone.
    const relays = (await listTunnels(env)).filter((bridge) => bridge.kind === 'relay');
    expect(relays).toHaveLength(2);
    for (const relay of relays) expect(relay).toMatchObject({ state: 'ready', lastError: null, endpoints: 2 });
    for (const mount of [...attacker.plan.mounts, ...other.plan.mounts].filter((m) => m.purpose === 'ssh agent' || m.purpose === 'socket extra')) {
      expect(readdirSync(mount.source)).toEqual(['agent.sock']);
    }
  });

  it('a session socket replaced anyway (from the host, standing in for a bug) is noticed on the sweep, re-created and reported', async () => {
    const { env, image, agent, sockets, realKeys } = await setup();
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false, sockets });
    cleanup.add(() => session.release());
    const relayOf = async () => (await listTunnels(env)).find((bridge) => bridge.kind === 'relay' && bridge.hostAgentSocket === agent.socket);
    const socket = path.join(session.plan.mounts.find((mount) => mount.purpose === 'ssh agent')?.source ?? '', 'agent.sock');
    const impostor = net.createServer((client) => client.destroy());
    cleanup.add(() => new Promise((resolve) => impostor.close(resolve)));
    renameSync(socket, `${socket}.moved`);
    await new Promise<void>((resolve) => impostor.listen(socket, resolve));

    const noticed = await waitFor(async () => {
      const relay = await relayOf();
      return relay?.state === 'ready' && relay.restarts > 0 ? relay : null;
    }, 'the sweep to notice and re-create it', 15_000, 100);
    expect(noticed).toMatchObject({ restarts: 1, lastError: expect.stringMatching(/agent\.sock is not the socket it bound/) as string });
    // The session's container (one container per plan), started only now, gets the agent.
    expect(await keysSeen(env, image, session)).toEqual(realKeys);
  });

  it('Podman machine: each session\'s directory in the VM is read-only too, and holds its socket alone', async () => {
    const { sandbox, podmanEnv, image, agent, sockets, realKeys } = await setup();
    const conf = await startPodmanMachine(sandbox, podmanEnv, cleanup);
    const env = cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, SSH_AUTH_SOCK: agent.socket });
    const attacker = await acquireSession({ engine: 'podman', env, heartbeat: false, sshBridge: 'tunnel', sockets });
    cleanup.add(() => attacker.release());
    expect(attacker.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'tunnel' });
    expect(attacker.plan.mounts.filter((mount) => mount.purpose === 'ssh agent' || mount.purpose === 'socket extra').map((mount) => mount.readOnly)).toEqual([true, true]);
    const attempted = await attack(env, image, attacker);

    const other = await acquireSession({ engine: 'podman', env, heartbeat: false, sshBridge: 'tunnel', sockets });
    cleanup.add(() => other.release());
    expect(await keysSeen(env, image, other)).toEqual(realKeys);
    expect(attempted).toBe('attacked');
    const tunnels = await listTunnels(env);
    expect(tunnels).toHaveLength(2);
    for (const tunnel of tunnels) expect(tunnel).toMatchObject({ state: 'ready', lastError: null, endpoints: 2 });
    for (const mount of [...attacker.plan.mounts, ...other.plan.mounts].filter((m) => m.purpose === 'ssh agent' || m.purpose === 'socket extra')) {
      // `.bound` is the script's own hard link to the socket sshd bound (the check below).
      expect(readdirSync(mount.source).sort()).toEqual(['.bound', 'agent.sock']);
    }
  });

  it('a session socket in the VM replaced anyway (by a VM process of the remote user, standing in for a bug) is noticed on the sweep, forwarded anew and reported', async () => {
    const { sandbox, podmanEnv, image, agent, sockets, realKeys } = await setup();
    const conf = await startPodmanMachine(sandbox, podmanEnv, cleanup);
    const env = cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, SSH_AUTH_SOCK: agent.socket });
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false, sshBridge: 'tunnel', sockets });
    cleanup.add(() => session.release());
    const tunnelOf = async () => (await listTunnels(env)).find((bridge) => bridge.kind === 'tunnel' && bridge.hostAgentSocket === agent.socket);
    const socket = path.join(session.plan.mounts.find((mount) => mount.purpose === 'ssh agent')?.source ?? '', 'agent.sock');
    // The lab's "VM" shares this /tmp: an impostor listening where the session's socket was.
    const impostor = net.createServer((client) => client.destroy());
    cleanup.add(() => new Promise((resolve) => impostor.close(resolve)));
    renameSync(socket, `${socket}.moved`);
    await new Promise<void>((resolve) => impostor.listen(socket, resolve));

    await waitFor(async () => {
      const tunnel = await tunnelOf();
      return tunnel?.state === 'ready' && tunnel.lastError !== null ? tunnel : null;
    }, 'the sweep to notice and forward it anew', 20_000, 100);
    expect(await tunnelOf()).toMatchObject({ restarts: 1, lastError: expect.stringMatching(/was not the one sshd bound; forwarded it anew/) as string });
    expect(await keysSeen(env, image, session)).toEqual(realKeys);
  });
});
