import { describe, expect, it } from 'vitest';
import { AcquireRequest, type SshBridgeSetting } from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';
import { mergeFlagGroups, type SshDeps } from '../../daemon/plan/host-sockets.js';
import { planSsh } from '../../daemon/plan/ssh.js';
import type { ServedAgent } from '../../daemon/bridges/bridge.js';

const input = (extra: Record<string, unknown> = {}) =>
  AcquireRequest.parse({ engine: 'podman', client: { pid: 10, cwd: '/w', sshAuthSock: '/tmp/agent.sock' }, ...extra });

const PROXY = { name: 'credential-proxy', hostPath: '/tmp/proxy.sock', env: 'LLXPRT_CREDENTIAL_SOCKET' };

interface FakeHost {
  /** Sockets that answer, by the path the client gave; their realpath is `/real<path>`. */
  answering: Set<string>;
  /** Host sockets whose bridge fails, with the error it throws. */
  failing?: Map<string, Error>;
  flags?: string[];
}

/** Stands in for the relay/tunnel: records what it served and with which bridge setting. */
function fakeDeps(host: FakeHost): SshDeps & { served: { socket: string; bridge: SshBridgeSetting }[]; released: string[] } {
  const served: { socket: string; bridge: SshBridgeSetting }[] = [];
  const released: string[] = [];
  return {
    served,
    released,
    inspect: (socket, label = 'SSH_AUTH_SOCK') =>
      Promise.resolve(socket !== undefined && host.answering.has(socket) ? { usable: true as const, path: `/real${socket}`, keys: null } : { usable: false as const, reason: `${label} ${socket ?? ''} does not exist` }),
    serve: (socket, session): Promise<ServedAgent> => {
      served.push({ socket, bridge: session.sshBridge });
      const failure = host.failing?.get(socket);
      if (failure !== undefined) return Promise.reject(failure);
      const id = `relay_${socket.replaceAll('/', '')}`;
      return Promise.resolve({
        lease: { bridgeId: id, release: () => void released.push(id) },
        kind: 'mount',
        mountSource: `/rt/agents/${id}`,
        relabel: 'z',
        flags: host.flags ?? [],
        warnings: host.flags === undefined ? [] : ['selinux says so'],
      });
    },
  };
}

describe('extra host sockets (planSsh)', () => {
  it('carries a socket like the agent: its own directory, the variable naming the socket, a lease', async () => {
    const deps = fakeDeps({ answering: new Set(['/tmp/agent.sock', '/tmp/proxy.sock']) });
    const section = await planSsh(input({ sockets: [PROXY] }), deps);
    expect(section.sockets).toEqual([
      {
        name: 'credential-proxy',
        status: 'forwarded',
        bridge: 'mount',
        socket: '/run/sandboxd/sockets/credential-proxy/agent.sock',
        hostSocket: '/real/tmp/proxy.sock',
        bridgeId: 'relay_realtmpproxy.sock',
        env: 'LLXPRT_CREDENTIAL_SOCKET',
      },
    ]);
    expect(section.mounts).toEqual([
      { source: '/rt/agents/relay_realtmpagent.sock', target: '/run/sandboxd/ssh', readOnly: true, purpose: 'ssh agent', relabel: 'z' },
      { source: '/rt/agents/relay_realtmpproxy.sock', target: '/run/sandboxd/sockets/credential-proxy', readOnly: true, purpose: 'socket credential-proxy', relabel: 'z' },
    ]);
    expect(section.env).toEqual({ SSH_AUTH_SOCK: '/run/sandboxd/ssh/agent.sock', LLXPRT_CREDENTIAL_SOCKET: '/run/sandboxd/sockets/credential-proxy/agent.sock' });
    expect(section.leases.map((lease) => lease.bridgeId)).toEqual(['relay_realtmpagent.sock', 'relay_realtmpproxy.sock']);
    expect(section.warnings).toEqual([]);
  });

  it('skips a missing socket with a warning and keeps the others; no variable without a socket', async () => {
    const deps = fakeDeps({ answering: new Set(['/tmp/gpg.sock']) });
    const section = await planSsh(input({ sshAgent: 'off', sockets: [PROXY, { name: 'gpg', hostPath: '/tmp/gpg.sock' }] }), deps);
    expect(section.sockets).toEqual([
      { name: 'credential-proxy', status: 'skipped', reason: 'socket credential-proxy /tmp/proxy.sock does not exist' },
      expect.objectContaining({ name: 'gpg', status: 'forwarded', env: null, socket: '/run/sandboxd/sockets/gpg/agent.sock' }),
    ]);
    expect(section.env).toEqual({});
    expect(section.mounts.map((mount) => mount.target)).toEqual(['/run/sandboxd/sockets/gpg']);
    expect(section.warnings).toEqual(['socket credential-proxy is not forwarded: socket credential-proxy /tmp/proxy.sock does not exist']);
  });

  it('a bridge that fails is a skipped socket, never a failed session', async () => {
    const failing = new Map([['/real/tmp/proxy.sock', new SandboxdError('TUNNEL_UNREACHABLE', 'the machine behind connection m is unreachable')]]);
    const deps = fakeDeps({ answering: new Set(['/tmp/agent.sock', '/tmp/proxy.sock']), failing });
    const section = await planSsh(input({ sockets: [PROXY] }), deps);
    expect(section.ssh.status).toBe('forwarded');
    expect(section.sockets).toEqual([{ name: 'credential-proxy', status: 'skipped', reason: 'the machine behind connection m is unreachable' }]);
  });

  it('gives the sockets\' leases back when the agent fails the session', async () => {
    const deps = fakeDeps({ answering: new Set(['/tmp/proxy.sock']) });
    const error = await planSsh(input({ sshAgent: 'on', sockets: [PROXY] }), deps).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'SSH_AGENT_UNAVAILABLE' });
    expect(deps.released).toEqual(['relay_realtmpproxy.sock']);
  });

  it.each([
    ['none', 'auto'],
    ['desktop', 'auto'],
    ['tunnel', 'tunnel'],
    ['mount', 'mount'],
  ] as const)('sockets take the agent\'s bridge setting, except that %s means %s for them', async (setting, expected) => {
    const deps = fakeDeps({ answering: new Set(['/tmp/proxy.sock']) });
    await planSsh(input({ sshAgent: 'off', sshBridge: setting, sockets: [PROXY] }), deps);
    expect(deps.served).toEqual([{ socket: '/real/tmp/proxy.sock', bridge: expected }]);
  });

  it('asks for a run flag and warns once when every bridge into the VM wants the same', async () => {
    const deps = fakeDeps({ answering: new Set(['/tmp/agent.sock', '/tmp/proxy.sock', '/tmp/gpg.sock']), flags: ['--security-opt', 'label=disable'] });
    const section = await planSsh(input({ sockets: [PROXY, { name: 'gpg', hostPath: '/tmp/gpg.sock' }] }), deps);
    expect(section.flags).toEqual(['--security-opt', 'label=disable']);
    expect(section.warnings).toEqual(['selinux says so']);
  });
});

describe('mergeFlagGroups', () => {
  it('appends only groups not already present', () => {
    expect(mergeFlagGroups([], [['--a', '1'], ['--a', '1'], ['--b']])).toEqual(['--a', '1', '--b']);
    expect(mergeFlagGroups(['--a', '1'], [['--a', '1']])).toEqual(['--a', '1']);
  });
});

describe('AcquireRequest sockets', () => {
  const socket = (extra: Record<string, unknown> = {}) => ({ name: 'proxy', hostPath: '/tmp/p.sock', ...extra });
  it.each([
    ['an upper-case name', [socket({ name: 'Proxy' })]],
    ['a name starting with a digit', [socket({ name: '1proxy' })]],
    ['a name of 33 characters', [socket({ name: `a${'b'.repeat(32)}` })]],
    ['a name with a slash', [socket({ name: 'a/b' })]],
    ['a relative path', [socket({ hostPath: 'p.sock' })]],
    ['a bad variable name', [socket({ env: 'A-B' })]],
    ['two sockets of one name', [socket(), socket({ hostPath: '/tmp/q.sock' })]],
    ['two sockets naming one variable', [socket({ env: 'X' }), socket({ name: 'other', env: 'X' })]],
    ['nine sockets', Array.from({ length: 9 }, (_, i) => socket({ name: `s${i}` }))],
    ['an unknown field', [socket({ mode: 'rw' })]],
  ])('rejects %s', (_name, sockets) => {
    expect(input.bind(null, { sockets })).toThrow();
  });

  it('accepts eight sockets and defaults to none', () => {
    expect(input({ sockets: Array.from({ length: 8 }, (_, i) => socket({ name: `s${i}`, env: `S${i}` })) }).sockets).toHaveLength(8);
    expect(input().sockets).toEqual([]);
  });
});
