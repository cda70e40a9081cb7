import { describe, expect, it } from 'vitest';
import { AcquireRequest } from '../../shared/contracts/sessions.js';
import type { ServedAgent, Unavailable } from '../../daemon/bridges/bridge.js';
import { builtinCredentialsUnavailable } from '../../daemon/bridges/docker-bridges.js';
import type { CredentialSession } from '../../daemon/credentials/credential-server.js';
import { credentialHelperEnv, type CredentialDeps } from '../../daemon/plan/git-credentials.js';
import type { SshDeps } from '../../daemon/plan/host-sockets.js';
import { planSsh } from '../../daemon/plan/ssh.js';

const input = (extra: Record<string, unknown> = {}) =>
  AcquireRequest.parse({ engine: 'podman', sshAgent: 'off', client: { pid: 10, cwd: '/w', path: '/usr/bin' }, gitCredentials: ['github.com', 'git.example.com:8443'], ...extra });

/** Stands in for the bridges (what they serve) and the daemon's credential server (who registered). */
function fakes(answer: (socket: string) => ServedAgent | Unavailable) {
  const served: { socket: string; name: string | null; bridge: string; role: string }[] = [];
  const released: string[] = [];
  const registered = new Map<string, CredentialSession>();
  const ssh: SshDeps = {
    inspect: () => Promise.resolve({ usable: false, reason: 'none' }),
    serve: (socket, session, role, name) => {
      served.push({ socket, name, bridge: session.sshBridge, role });
      return Promise.resolve(answer(socket));
    },
  };
  const credentials: CredentialDeps = {
    socket: '/rt/git-credential.sock',
    hostHome: '/home/me',
    register: (endpoint, session) => {
      registered.set(endpoint, session);
      return () => registered.delete(endpoint);
    },
  };
  const relay = (): ServedAgent => ({
    lease: { bridgeId: 'relay_cred', release: () => void released.push('relay_cred') },
    kind: 'mount',
    mountSource: '/rt/agents/0123456789abcdef',
    endpointPath: '/rt/agents/0123456789abcdef/agent.sock',
    relabel: 'z',
    flags: [],
    warnings: [],
  });
  return { ssh, credentials, served, released, registered, relay };
}

describe('git credentials in the plan', () => {
  it('git asks only the session\'s socket, only for the named https origins: each host\'s helper list is emptied first', () => {
    expect(credentialHelperEnv(['github.com', '[::1]:8443'])).toEqual({
      GIT_CONFIG_COUNT: '4',
      GIT_CONFIG_KEY_0: 'credential.https://github.com.helper',
      GIT_CONFIG_VALUE_0: '',
      GIT_CONFIG_KEY_1: 'credential.https://github.com.helper',
      GIT_CONFIG_VALUE_1: 'cache --socket /run/sandboxd/git-credential/agent.sock',
      GIT_CONFIG_KEY_2: 'credential.https://[::1]:8443.helper',
      GIT_CONFIG_VALUE_2: '',
      GIT_CONFIG_KEY_3: 'credential.https://[::1]:8443.helper',
      GIT_CONFIG_VALUE_3: 'cache --socket /run/sandboxd/git-credential/agent.sock',
    });
  });

  it('serves the daemon\'s credential socket as a session socket of its own, mounted read-only, registered for the session until its lease ends', async () => {
    const f = fakes(() => f.relay());
    const section = await planSsh(input({ sshBridge: 'none' }), f.ssh, { sessionId: 'ses_abc123', credentials: f.credentials });
    expect(f.served).toEqual([{ socket: '/rt/git-credential.sock', name: 'git-credential', bridge: 'auto', role: 'credentials' }]);
    expect(section.gitCredentials).toEqual({ status: 'served', hosts: ['github.com', 'git.example.com:8443'], bridge: 'mount', socket: '/run/sandboxd/git-credential/agent.sock' });
    expect(section.mounts).toContainEqual({ source: '/rt/agents/0123456789abcdef', target: '/run/sandboxd/git-credential', readOnly: true, purpose: 'git credentials', relabel: 'z' });
    expect(section.env.GIT_CONFIG_COUNT).toBe('4');
    expect(section.notices.join('\n')).toContain('code in the sandbox can read those tokens');
    expect(f.registered.get('/rt/agents/0123456789abcdef/agent.sock')).toEqual({
      sessionId: 'ses_abc123',
      hosts: ['github.com', 'git.example.com:8443'],
      fill: { hostHome: '/home/me', path: '/usr/bin', xdgConfigHome: undefined },
    });
    for (const lease of section.leases) lease.release();
    expect(f.registered.size).toBe(0);
    expect(f.released).toEqual(['relay_cred']);
  });

  it('its socket\'s record carries the hosts and how the host git runs, so the next daemon answers the same until the client renews', async () => {
    const f = fakes(() => ({ ...f.relay(), lease: { bridgeId: 'relay_cred', release: () => undefined, kept: () => ({ kind: 'relay', name: 'git-credential', upstream: '/rt/git-credential.sock', dir: '0123456789abcdef' }) } }));
    const section = await planSsh(input({ sshBridge: 'none', client: { pid: 10, cwd: '/w', path: '/usr/bin', env: { XDG_CONFIG_HOME: '/home/me/.cfg' } } }), f.ssh, { sessionId: 'ses_abc123', credentials: f.credentials });
    expect(section.leases.map((lease) => lease.kept?.())).toEqual([
      { kind: 'relay', name: 'git-credential', upstream: '/rt/git-credential.sock', dir: '0123456789abcdef', credentials: { hosts: ['github.com', 'git.example.com:8443'], path: '/usr/bin', xdgConfigHome: '/home/me/.cfg' } },
    ]);
    // A bridge whose socket no next daemon can serve again records nothing.
    const unkept = fakes(() => unkept.relay());
    const plain = await planSsh(input({ sshBridge: 'none' }), unkept.ssh, { sessionId: 'ses_abc123', credentials: unkept.credentials });
    expect(plain.leases.map((lease) => 'kept' in lease)).toEqual([false]);
  });

  it('a bridge that cannot carry it (Docker Desktop\'s built-in agent only) is a warning with the reason and the remedy, never a silent no', async () => {
    const f = fakes(() => builtinCredentialsUnavailable('Docker Desktop'));
    const section = await planSsh(input({ engine: 'docker' }), f.ssh, { sessionId: 'ses_abc123', credentials: f.credentials });
    const reason = "Docker Desktop carries only its own agent into its VM: no socket of the session's own reaches its containers, so no request could be told from another container's";
    expect(section.gitCredentials).toEqual({ status: 'skipped', hosts: ['github.com', 'git.example.com:8443'], reason });
    expect(section.warnings).toContain(
      `git: HTTPS credentials for github.com, git.example.com:8443 are not served: ${reason} (remedy: use an ssh remote (the agent is forwarded), a Podman machine (\`--engine podman\`), or Docker Engine on Linux)`,
    );
    expect(section.env.GIT_CONFIG_COUNT).toBeUndefined();
    expect(f.registered.size).toBe(0);
  });

  it('nothing asked, nothing served', async () => {
    const f = fakes(() => f.relay());
    const section = await planSsh(input({ gitCredentials: [] }), f.ssh, { sessionId: 'ses_abc123', credentials: f.credentials });
    expect(section.gitCredentials).toBeNull();
    expect(f.served).toEqual([]);
    expect(section.env).toEqual({});
  });

  it('the wire takes only normalised hosts, each once', () => {
    expect(AcquireRequest.safeParse({ engine: 'podman', client: { pid: 1, cwd: '/' }, gitCredentials: ['GitHub.com'] }).success).toBe(false);
    expect(AcquireRequest.safeParse({ engine: 'podman', client: { pid: 1, cwd: '/' }, gitCredentials: ['github.com:443'] }).success).toBe(false);
    expect(AcquireRequest.safeParse({ engine: 'podman', client: { pid: 1, cwd: '/' }, gitCredentials: ['github.com', 'github.com'] }).success).toBe(false);
    expect(AcquireRequest.safeParse({ engine: 'podman', client: { pid: 1, cwd: '/' }, gitCredentials: ['https://github.com'] }).success).toBe(false);
  });
});
