import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { AcquireRequest } from '../../shared/contracts/sessions.js';
import { dedupeMounts, flattenArgs } from '../../daemon/plan/flatten.js';
import { planGit, type GitRepo } from '../../daemon/plan/git.js';
import { parseMountSpec } from '../../daemon/plan/mount-spec.js';
import { planSsh, type SshDeps } from '../../daemon/plan/ssh.js';

const input = (extra: Record<string, unknown> = {}) =>
  AcquireRequest.parse({ engine: 'podman', client: { pid: 10, cwd: '/w', sshAuthSock: '/tmp/a.sock' }, ...extra });

/** Stands in for the relay: no sockets, records what it was asked to serve. */
function fakeSsh(usable: boolean): SshDeps & { served: string[]; released: number } {
  const state = { served: [] as string[], released: 0 };
  return Object.assign(state, {
    inspect: () => Promise.resolve(usable ? { usable: true as const, realpath: '/real/a.sock' } : { usable: false as const, reason: 'no agent answers on SSH_AUTH_SOCK /tmp/a.sock' }),
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
    expect(section.mounts).toEqual([{ source: '/rt/agents/abc', target: '/run/sandboxd/ssh', readOnly: false, purpose: 'ssh agent', relabel: 'z' }]);
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

const noRepo = { repo: null, hooks: 'readonly' as const, emptyDir: '/rt/empty' };

describe('planGit (dual HOME)', () => {
  const files = [
    { path: '/home/u/.gitconfig', source: '/home/u/dotfiles/gitconfig' },
    { path: '/home/u/.config/git/config', source: '/home/u/.config/git/config' },
  ];

  it('mounts each file read-only at the host path and under the container HOME', () => {
    const plan = planGit({ ...noRepo, hostHome: '/home/u', containerHome: '/root', configFiles: files, relabel: undefined });
    expect(plan.mounts.map((m) => [m.source, m.target, m.readOnly])).toEqual([
      ['/home/u/dotfiles/gitconfig', '/home/u/.gitconfig', true],
      ['/home/u/dotfiles/gitconfig', '/root/.gitconfig', true],
      ['/home/u/.config/git/config', '/home/u/.config/git/config', true],
      ['/home/u/.config/git/config', '/root/.config/git/config', true],
    ]);
    expect(plan.env).toEqual({ GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' });
  });

  it('mounts once when the homes are equal', () => {
    const plan = planGit({ ...noRepo, hostHome: '/home/u', containerHome: '/home/u', configFiles: files, relabel: 'z' });
    expect(plan.mounts.map((m) => m.target)).toEqual(['/home/u/.gitconfig', '/home/u/.config/git/config']);
    expect(plan.mounts.every((m) => m.relabel === 'z')).toBe(true);
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
      flags: ['--security-opt', 'label=disable'],
      warnings: [],
    });
    expect(args).toEqual(['-v', '/a:/b:ro,z', '-v', '/c:/d', '-e', 'A=two words', '-e', 'Z=1', '--security-opt', 'label=disable']);
  });

  it('keeps the first mount for a target', () => {
    const mounts = dedupeMounts([
      { source: '/x', target: '/t', readOnly: true, purpose: 'first' },
      { source: '/y', target: '/t', readOnly: false, purpose: 'second' },
    ]);
    expect(mounts.map((m) => m.purpose)).toEqual(['first']);
  });
});

describe('planGit repositories', () => {
  const base = { hostHome: '/h', containerHome: '/h', configFiles: [], emptyDir: '/rt/empty', relabel: undefined };
  const worktree: GitRepo = {
    topLevel: '/src/wt',
    gitDir: '/src/main/.git/worktrees/wt',
    commonDir: '/src/main/.git',
    linked: true,
    commonEntries: ['objects', 'refs', 'logs', 'config', 'info', 'hooks', 'HEAD', 'packed-refs'],
  };
  const table = (plan: ReturnType<typeof planGit>) => plan.mounts.map((m) => `${m.target}${m.readOnly ? ':ro' : ':rw'}`);

  it('grants a linked worktree what git writes, config and info read-only, hooks read-only', () => {
    expect(table(planGit({ ...base, repo: worktree, hooks: 'readonly' }))).toEqual([
      '/src/main/.git/worktrees/wt:rw',
      '/src/main/.git/objects:rw',
      '/src/main/.git/refs:rw',
      '/src/main/.git/logs:rw',
      '/src/main/.git/packed-refs:rw',
      '/src/main/.git/config:ro',
      '/src/main/.git/info:ro',
      '/src/main/.git/hooks:ro',
    ]);
  });

  it('skips common-dir entries that do not exist and never mounts the common dir whole', () => {
    const plan = planGit({ ...base, repo: { ...worktree, commonEntries: ['objects', 'refs', 'config'] }, hooks: 'readonly' });
    expect(table(plan)).toEqual(['/src/main/.git/worktrees/wt:rw', '/src/main/.git/objects:rw', '/src/main/.git/refs:rw', '/src/main/.git/config:ro']);
    expect(plan.mounts.some((m) => m.target === '/src/main/.git')).toBe(false);
  });

  it('covers a plain clone\'s hooks read-only, with the empty dir when hooks/ is missing', () => {
    const plain: GitRepo = { topLevel: '/src/p', gitDir: '/src/p/.git', commonDir: '/src/p/.git', linked: false, commonEntries: ['hooks'] };
    expect(planGit({ ...base, repo: plain, hooks: 'readonly' }).mounts).toEqual([
      { source: '/src/p/.git/hooks', target: '/src/p/.git/hooks', readOnly: true, purpose: 'git hooks (read-only)' },
    ]);
    expect(planGit({ ...base, repo: { ...plain, commonEntries: [] }, hooks: 'readonly' }).mounts).toEqual([
      { source: '/rt/empty', target: '/src/p/.git/hooks', readOnly: true, purpose: 'git hooks (read-only)' },
    ]);
    expect(planGit({ ...base, repo: plain, hooks: 'writable' }).mounts).toEqual([]);
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
