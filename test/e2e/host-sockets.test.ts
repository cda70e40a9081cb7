import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, listTunnels } from '../../dist/client/index.js';
import { Cleanup, cliEnv, makeSandbox, startAgent } from '../helpers.js';
import { startPodmanMachine } from '../lab/podman-machine.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const SCRIPT = 'ssh-add -l; SSH_AUTH_SOCK="$EXTRA_SOCKET" ssh-add -l';

describe.skipIf(labMissing)('extra host sockets, carried the agent\'s way (real agents, podman, sshd)', () => {
  async function setup() {
    const { env: podmanEnv, image } = podmanLab();
    const sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const extra = await startAgent(sandbox.dir, cleanup, 'extra');
    return { sandbox, podmanEnv, image, agent, extra, env: cliEnv(sandbox, { ...podmanEnv, SSH_AUTH_SOCK: agent.socket }) };
  }

  async function runAsUser1000(env: NodeJS.ProcessEnv, image: string, plan: Parameters<typeof applyPlan>[1]) {
    const applied = applyPlan(['run', '--rm', '--network', 'none', '--user', '1000:1000', image, 'sh', '-c', SCRIPT], plan);
    return execa('podman', [...applied.globalArgs, ...applied.args], { env: { ...env, ...applied.spawnEnv }, extendEnv: false, reject: false, timeout: 90_000 });
  }

  it('Linux relay: the second socket answers in the container at the path in its variable', async () => {
    const { env, image, agent, extra } = await setup();
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false, sockets: [{ name: 'extra', hostPath: extra.socket, env: 'EXTRA_SOCKET' }] });
    cleanup.add(() => session.release());
    expect(session.sockets).toEqual([
      expect.objectContaining({ name: 'extra', status: 'forwarded', bridge: 'mount', socket: '/run/sandboxd/sockets/extra/agent.sock', hostSocket: extra.socket, env: 'EXTRA_SOCKET' }),
    ]);
    const result = await runAsUser1000(env, image, session.plan);
    expect(result.stderr).toBe('');
    const [first, second] = result.stdout.split('\n');
    expect(first).toContain(agent.fingerprint);
    expect(second).toContain(extra.fingerprint);
    const relays = (await listTunnels(env)).filter((bridge) => bridge.kind === 'relay');
    expect(relays.map((relay) => relay.hostAgentSocket).sort()).toEqual([agent.socket, extra.socket].sort());
  });

  it('Podman machine: the second socket gets its own tunnel over the same connection', async () => {
    const { sandbox, podmanEnv, image, agent, extra } = await setup();
    const conf = await startPodmanMachine(sandbox, podmanEnv, cleanup);
    const env = cliEnv(sandbox, { ...podmanEnv, CONTAINERS_CONF: conf, SSH_AUTH_SOCK: agent.socket });
    const session = await acquireSession({ engine: 'podman', env, heartbeat: false, sshBridge: 'tunnel', sockets: [{ name: 'extra', hostPath: extra.socket, env: 'EXTRA_SOCKET' }] });
    cleanup.add(() => session.release());
    expect(session.sockets).toEqual([expect.objectContaining({ name: 'extra', status: 'forwarded', bridge: 'tunnel' })]);
    const tunnels = await listTunnels(env);
    expect(tunnels.map((tunnel) => [tunnel.kind, tunnel.connection, tunnel.hostAgentSocket]).sort()).toEqual(
      [['tunnel', 'lab', agent.socket], ['tunnel', 'lab', extra.socket]].sort(),
    );
    const result = await runAsUser1000(env, image, session.plan);
    expect(result.stderr).toBe('');
    const [first, second] = result.stdout.split('\n');
    expect(first).toContain(agent.fingerprint);
    expect(second).toContain(extra.fingerprint);
  });
});
