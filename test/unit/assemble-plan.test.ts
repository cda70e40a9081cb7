import { describe, expect, it } from 'vitest';
import { AcquireRequest, type AcquireRequest as AcquireRequestBody } from '../../shared/contracts/sessions.js';
import type { Mount } from '../../shared/contracts/plan.js';
import type { GitHostFacts } from '../../daemon/plan/git/git-host.js';
import type { SshSection } from '../../daemon/plan/ssh.js';
import { assemblePlan, sessionMounts, type PlanParts } from '../../daemon/sessions/assemble-plan.js';

const CWD = '/home/u/src/app';

function input(overrides: Partial<AcquireRequestBody> = {}) {
  return AcquireRequest.parse({ engine: 'docker', client: { pid: 4242, cwd: CWD, env: { TERM: 'xterm', COLORTERM: 'truecolor' } }, ...overrides });
}

function mount(source: string, purpose: string, target = source): Mount {
  return { source, target, readOnly: true, purpose };
}

const GIT: GitHostFacts = { configs: [], files: [], namedPaths: [], plainHomeFiles: [], configWatched: [], overrides: null, knownHosts: [], repo: null, git: '/usr/bin/git', warnings: [] };

const SSH: SshSection = {
  ssh: { status: 'forwarded', bridge: 'mount', socket: '/run/sandboxd/agent/agent.sock', hostAgentSocket: '/tmp/agent.sock', bridgeId: 'b1' },
  sockets: [],
  mounts: [mount('/run/relay', 'ssh agent', '/run/sandboxd/agent')],
  env: { SSH_AUTH_SOCK: '/run/sandboxd/agent/agent.sock' },
  flags: ['--add-host', 'x'],
  warnings: ['ssh warning'],
  leases: [],
};

function parts(overrides: Partial<PlanParts> = {}): PlanParts {
  return {
    sessionId: 'ses_test0001',
    input: input(),
    facts: {
      cwd: CWD,
      containerHome: '/root',
      relabel: undefined,
      requested: [],
      ssh: SSH,
      git: GIT,
      cloud: { mounts: [], env: {} },
      userEngine: { kind: 'other' },
    },
    git: { mounts: [], env: { GIT_CONFIG_GLOBAL: '/run/sandboxd/git/config' }, warnings: ['git warning'], notices: ['git notice'] },
    site: { globalArgs: ['--connection', 'vm'], mounts: [], warnings: ['mount warning'] },
    gitStatus: null,
    users: { flags: [], warnings: [], notices: [] },
    container: { flags: ['--cidfile', '/state/ses_test0001.cid'], container: { id: null, cidfile: '/state/ses_test0001.cid' } },
    now: Date.UTC(2026, 0, 2, 3, 4, 5),
    leaseTtlMs: 30_000,
    ...overrides,
  };
}

describe('the acquire answer, assembled from its facts', () => {
  it('puts the flags in order: ssh, workdir, the container record, the hardened profile', () => {
    const plain = assemblePlan(parts());
    expect(plain.plan.flags).toEqual(['--add-host', 'x', '--cidfile', '/state/ses_test0001.cid']);
    const all = assemblePlan(parts({ input: input({ workdir: true, harden: true }) }));
    expect(all.plan.flags.slice(0, 6)).toEqual(['--add-host', 'x', '--workdir', CWD, '--cidfile', '/state/ses_test0001.cid']);
    expect(all.plan.flags.slice(6)).toContain('--read-only');
    // The argv a client passes ends with the flags.
    expect(all.plan.args.slice(-all.plan.flags.length)).toEqual(all.plan.flags);
  });

  it('puts the warnings in order: ssh, git, the repository, mounts, then passed variables', () => {
    const answer = assemblePlan(parts({ input: input({ passEnv: { SSH_AUTH_SOCK: '/elsewhere' } }) }));
    expect(answer.plan.warnings).toEqual([
      'ssh warning',
      'git warning',
      'mount warning',
      '--pass-env SSH_AUTH_SOCK is ignored: sandboxd sets SSH_AUTH_SOCK in the container itself',
    ]);
  });

  it('lets ssh win over git and cloud credentials over both; a passed variable never overrides the plan, and travels by name', () => {
    const base = parts();
    const answer = assemblePlan({
      ...base,
      input: input({ passEnv: { SSH_AUTH_SOCK: '/elsewhere', TOKEN: 'secret', TERM: 'dumb' } }),
      git: { ...base.git, env: { SHARED: 'git', GIT_CONFIG_GLOBAL: '/g' } },
      facts: { ...base.facts, ssh: { ...SSH, env: { SHARED: 'ssh', SSH_AUTH_SOCK: '/a' } }, cloud: { mounts: [], env: { SHARED: 'cloud' } } },
    });
    // TERM is named by the session, so it is passed by name rather than copied from the client.
    expect(answer.plan.env).toEqual({ SHARED: 'cloud', GIT_CONFIG_GLOBAL: '/g', SSH_AUTH_SOCK: '/a', COLORTERM: 'truecolor' });
    expect(answer.plan.spawnEnv).toEqual({ TOKEN: 'secret', TERM: 'dumb' });
    expect(answer.plan.args).not.toContain('TOKEN=secret');
  });

  it('answers the session, the lease terms and the sockets; a heartbeat every third of the lease, never under a second', () => {
    const answer = assemblePlan(parts({ input: input({ label: 'llxprt' }) }));
    expect(answer.session).toEqual({
      id: 'ses_test0001',
      engine: 'docker',
      label: 'llxprt',
      clientPid: 4242,
      createdAt: '2026-01-02T03:04:05.000Z',
      lastHeartbeatAt: '2026-01-02T03:04:05.000Z',
      ssh: SSH.ssh,
      container: { id: null, cidfile: '/state/ses_test0001.cid' },
      refused: 0,
      git: null,
    });
    expect(answer.plan.globalArgs).toEqual(['--connection', 'vm']);
    expect(answer).toMatchObject({ leaseTtlMs: 30_000, heartbeatIntervalMs: 10_000, sockets: [] });
    expect(assemblePlan(parts({ leaseTtlMs: 2_000 })).heartbeatIntervalMs).toBe(1_000);
    expect(assemblePlan(parts()).session.label).toBeNull();
  });

  it("mounts ssh's first, then the workdir, git's, what protects the paths git reads, the requested and the cloud credentials, the first on a target winning", () => {
    const base = parts();
    const facts = {
      ...base.facts,
      requested: [mount('/data', 'requested'), mount('/other', 'requested twice', '/run/sandboxd/agent')],
      cloud: { mounts: [mount('/home/u/.aws', 'cloud credentials')], env: {} },
    };
    const git = { ...base.git, mounts: [mount('/home/u/.gitconfig', 'git config')] };
    const protection = [mount('/home/u/src/app/.husky', 'repository protection'), mount('/home/u/x', 'repository over requested', '/data')];
    const { mounts } = sessionMounts(input({ workdir: true }), facts, git, protection, '/home/u');
    expect(mounts.map((entry) => entry.purpose)).toEqual(['ssh agent', 'workdir', 'git config', 'repository protection', 'repository over requested', 'cloud credentials']);
    expect(sessionMounts(input(), facts, git, [], '/home/u').mounts.map((entry) => entry.purpose)).not.toContain('workdir');
  });

  it('refuses a workdir as wide as the home directory unless asked for', () => {
    const base = parts();
    const home = { ...base.facts, cwd: '/home/u' };
    expect(() => sessionMounts(input({ workdir: true }), home, base.git, [], '/home/u')).toThrow(expect.objectContaining({ code: 'WORKDIR_TOO_WIDE' }));
    expect(sessionMounts(input({ workdir: true, allowWideWorkdir: true }), home, base.git, [], '/home/u').mounts).toHaveLength(2);
  });
});
