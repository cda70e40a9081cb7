import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { AcquireRequest } from '../../shared/contracts/sessions.js';
import { dedupeMounts, flattenArgs } from '../../daemon/plan/flatten.js';
import { parseMountSpec } from '../../daemon/plan/mount-spec.js';
import { planSsh } from '../../daemon/plan/ssh.js';
import type { SshDeps } from '../../daemon/plan/host-sockets.js';

const input = (extra: Record<string, unknown> = {}) =>
  AcquireRequest.parse({ engine: 'podman', client: { pid: 10, cwd: '/w', sshAuthSock: '/tmp/a.sock' }, ...extra });

/** Stands in for the relay: no sockets, records what it was asked to serve. */
function fakeSsh(usable: boolean): SshDeps & { served: string[]; released: number } {
  const state = { served: [] as string[], released: 0 };
  return Object.assign(state, {
    inspect: () => Promise.resolve(usable ? { usable: true as const, realpath: '/real/a.sock', keys: 1 } : { usable: false as const, reason: 'no agent answers on SSH_AUTH_SOCK /tmp/a.sock' }),
    serve: (socket: string) => {
      state.served.push(socket);
      return Promise.resolve({
        lease: { bridgeId: 'relay_abc', release: () => void (state.released += 1) },
        kind: 'mount' as const,
        mountSource: '/rt/agents/abc',
        relabel: 'z' as const,
        flags: [],
        warnings: [],
      });
    },
  });
}

describe('planSsh', () => {
  it('forwards a usable agent through the bridge directory', async () => {
    const deps = fakeSsh(true);
    const section = await planSsh(input(), deps);
    expect(deps.served).toEqual(['/real/a.sock']);
    expect(section.ssh).toEqual({ status: 'forwarded', bridge: 'mount', socket: '/run/sandboxd/ssh/agent.sock', hostAgentSocket: '/real/a.sock', bridgeId: 'relay_abc' });
    expect(section.mounts).toEqual([{ source: '/rt/agents/abc', target: '/run/sandboxd/ssh', readOnly: true, purpose: 'ssh agent', relabel: 'z' }]);
    expect(section.env).toEqual({ SSH_AUTH_SOCK: '/run/sandboxd/ssh/agent.sock' });
  });

  it('skips with the reason under auto, fails with SSH_AGENT_UNAVAILABLE under on', async () => {
    const auto = await planSsh(input(), fakeSsh(false));
    expect(auto.ssh).toEqual({ status: 'skipped', reason: 'no agent answers on SSH_AUTH_SOCK /tmp/a.sock' });
    expect(auto.mounts).toEqual([]);
    const error = await planSsh(input({ sshAgent: 'on' }), fakeSsh(false)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SandboxdError);
    expect(error).toMatchObject({ code: 'SSH_AGENT_UNAVAILABLE', message: 'ssh-agent is on but no agent answers on SSH_AUTH_SOCK /tmp/a.sock' });
  });

  it('does not even look at the agent when off', async () => {
    const deps = fakeSsh(true);
    const section = await planSsh(input({ sshAgent: 'off' }), deps);
    expect(section.ssh).toEqual({ status: 'skipped', reason: 'ssh-agent is off for this session' });
    expect(deps.served).toEqual([]);
  });
});

describe('flattenArgs', () => {
  it('emits -v with ro and z options, sorted -e, then flags', () => {
    const args = flattenArgs({
      mounts: [
        { source: '/a', target: '/b', readOnly: true, relabel: 'z', purpose: 'x' },
        { source: '/c', target: '/d', readOnly: false, purpose: 'y' },
      ],
      env: { Z: '1', A: 'two words' },
      notices: [],
      spawnEnv: { TOKEN: 'secret' },
      globalArgs: [],
      flags: ['--security-opt', 'label=disable'],
      warnings: [],
    });
    expect(args).toEqual(['-v', '/a:/b:ro,z', '-v', '/c:/d', '-e', 'A=two words', '-e', 'Z=1', '-e', 'TOKEN', '--security-opt', 'label=disable']);
  });

  it('keeps the first mount for a target', () => {
    const mounts = dedupeMounts([
      { source: '/x', target: '/t', readOnly: true, purpose: 'first' },
      { source: '/y', target: '/t', readOnly: false, purpose: 'second' },
    ]);
    expect(mounts.map((m) => m.purpose)).toEqual(['first']);
  });
});

describe('parseMountSpec', () => {
  it('reads the four forms, read-only unless rw', () => {
    expect(parseMountSpec('/data')).toEqual({ source: '/data', target: '/data', readOnly: true });
    expect(parseMountSpec('/data:rw')).toEqual({ source: '/data', target: '/data', readOnly: false });
    expect(parseMountSpec('/a:/b')).toEqual({ source: '/a', target: '/b', readOnly: true });
    expect(parseMountSpec('/a:/b:ro')).toEqual({ source: '/a', target: '/b', readOnly: true });
  });

  it.each([
    ['relative', 'rel/path', 'mount "rel/path" is not absolute ("rel/path")'],
    ['colon tricks', '/a:/b:/c', 'mount "/a:/b:/c" has more than source:target[:ro|rw]; paths may not contain ":"'],
    ['option smuggling', '/a:/b:ro,z', 'mount "/a:/b:ro,z" contains a comma or control character'],
    ['dot-dot', '/a/../etc:/b', 'mount "/a/../etc:/b" contains ".." ("/a/../etc")'],
    ['empty', '/a::ro', 'mount "/a::ro" has an empty path'],
  ])('rejects %s with INVALID_MOUNT naming the entry', (_name, entry, message) => {
    expect(() => parseMountSpec(entry)).toThrow(expect.objectContaining({ code: 'INVALID_MOUNT', message }) as Error);
  });
});
