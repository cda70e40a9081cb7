import { describe, expect, it } from 'vitest';
import type { ConfigEntry } from '../../daemon/plan/git-config.js';
import { renderGlobalConfig } from '../../daemon/plan/git-global.js';
import { sandboxOverrides, type OverrideInput } from '../../daemon/plan/git-overrides.js';
import { gitFactsWatched, type GitHostFacts } from '../../daemon/plan/git-host.js';
import { planGit, sandboxPath, type GitPlanInput, type GitRepo } from '../../daemon/plan/git.js';

const readonlyPolicy = { hooks: 'readonly', config: 'readonly' } as const;

describe('planGit', () => {
  const base: GitPlanInput = {
    hostHome: '/home/u',
    containerHome: '/root',
    configFiles: [{ path: '/home/u/.gitconfig', source: '/home/u/dotfiles/gitconfig' }],
    repo: null,
    policy: readonlyPolicy,
    emptyDir: '/rt/empty',
    globalConfig: '/rt/git/abc.gitconfig',
    knownHosts: [{ path: '/home/u/.ssh/known_hosts', source: '/home/u/.ssh/known_hosts' }],
    signingKey: { path: '/home/u/.ssh/id_ed25519.pub', source: '/home/u/.ssh/id_ed25519.pub' },
    relabel: undefined,
  };

  it('points GIT_CONFIG_GLOBAL at the generated file and mounts config, known_hosts and the public key read-only', () => {
    const plan = planGit(base);
    expect(plan.env).toEqual({ GIT_DISCOVERY_ACROSS_FILESYSTEM: '1', GIT_CONFIG_GLOBAL: '/run/sandboxd/git/config' });
    expect(plan.mounts.map((m) => [m.source, m.target, m.readOnly])).toEqual([
      ['/home/u/dotfiles/gitconfig', '/home/u/.gitconfig', true],
      ['/home/u/dotfiles/gitconfig', '/root/.gitconfig', true],
      ['/home/u/dotfiles/gitconfig', '/run/sandboxd/git/home/.gitconfig', true],
      ['/home/u/.ssh/id_ed25519.pub', '/run/sandboxd/git/home/.ssh/id_ed25519.pub', true],
      ['/home/u/.ssh/known_hosts', '/run/sandboxd/known_hosts/known_hosts', true],
      ['/home/u/.ssh/known_hosts', '/root/.ssh/known_hosts', true],
      ['/rt/git/abc.gitconfig', '/run/sandboxd/git/config', true],
    ]);
  });

  it('without a known container HOME mounts only at host and fixed paths; without git, no generated config', () => {
    const plan = planGit({ ...base, containerHome: null, globalConfig: null });
    expect(plan.mounts.map((m) => m.target)).toEqual([
      '/home/u/.gitconfig',
      '/run/sandboxd/git/home/.gitconfig',
      '/run/sandboxd/git/home/.ssh/id_ed25519.pub',
      '/run/sandboxd/known_hosts/known_hosts',
    ]);
    expect(plan.env).toEqual({ GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' });
  });
});

const entry = (key: string, value: string | null): ConfigEntry => ({ scope: 'global', file: '/home/u/.gitconfig', key, value });
const overrides = (entries: ConfigEntry[], extra: Partial<OverrideInput> = {}) =>
  sandboxOverrides({
    entries,
    hostHome: '/home/u',
    knownHosts: [],
    sandboxPath: (file) => sandboxPath(file, '/home/u'),
    publicKeyExists: () => Promise.resolve(true),
    ...extra,
  });

describe('sandboxOverrides', () => {
  it('resets host-only credential helpers, keeps portable ones, per URL too, and says so', async () => {
    const result = await overrides([
      entry('credential.helper', 'osxkeychain'),
      entry('credential.helper', 'cache --timeout=60'),
      entry('credential.https://dev.azure.com.helper', '/usr/local/share/gcm-core/git-credential-manager'),
      entry('credential.https://example.com.helper', 'store'),
    ]);
    expect(result.settings).toEqual([
      { section: 'credential', key: 'helper', value: '' },
      { section: 'credential', key: 'helper', value: 'cache --timeout=60' },
      { section: 'credential', subsection: 'https://dev.azure.com', key: 'helper', value: '' },
    ]);
    expect(result.warnings).toEqual([
      'git: credential helper "osxkeychain" is a host program; it is reset in the sandbox',
      'git: credential helper "/usr/local/share/gcm-core/git-credential-manager" for https://dev.azure.com is a host program; it is reset in the sandbox',
    ]);
  });

  it('an empty helper value resets the list before it, as git does', async () => {
    const result = await overrides([entry('credential.helper', 'osxkeychain'), entry('credential.helper', ''), entry('credential.helper', 'store')]);
    expect(result.settings).toEqual([]);
  });

  it('neutralises fsmonitor, macOS editors and pagers, and a host gpg.ssh.program', async () => {
    const result = await overrides([
      entry('core.fsmonitor', 'true'),
      entry('core.editor', '/Applications/Visual Studio Code.app/Contents/Resources/app/bin/code --wait'),
      entry('core.pager', 'delta'),
      entry('gpg.ssh.program', '/Applications/1Password.app/Contents/MacOS/op-ssh-sign'),
    ]);
    expect(result.settings).toEqual([
      { section: 'core', key: 'fsmonitor', value: 'false' },
      { section: 'core', key: 'editor', value: 'vi' },
      { section: 'gpg', subsection: 'ssh', key: 'program', value: 'ssh-keygen' },
    ]);
    expect(result.warnings).toHaveLength(3);
    expect(result.warnings[2]).toBe('git: gpg.ssh.program "/Applications/1Password.app/Contents/MacOS/op-ssh-sign" is a host program; the sandbox signs with ssh-keygen through the forwarded agent');
  });

  it('SSH signing: the .pub file, absolute; a private key path becomes its .pub; key:: literals need nothing', async () => {
    const ssh = [entry('gpg.format', 'ssh'), entry('commit.gpgsign', 'true')];
    const pub = await overrides([...ssh, entry('user.signingkey', '~/.ssh/id_ed25519.pub')]);
    expect(pub.signingKey).toEqual({ path: '/home/u/.ssh/id_ed25519.pub', fromPrivateKey: false });
    expect(pub.settings).toEqual([{ section: 'user', key: 'signingkey', value: '/run/sandboxd/git/home/.ssh/id_ed25519.pub' }]);
    expect(pub.sshSigning).toBe(true);
    expect(pub.warnings).toEqual([]);

    const priv = await overrides([...ssh, entry('user.signingkey', '/home/u/.ssh/id_ed25519')]);
    expect(priv.signingKey).toEqual({ path: '/home/u/.ssh/id_ed25519.pub', fromPrivateKey: true });
    expect(priv.warnings[0]).toContain('names the private key /home/u/.ssh/id_ed25519; the sandbox signs with /home/u/.ssh/id_ed25519.pub');

    const noPub = await overrides([...ssh, entry('user.signingkey', '/home/u/.ssh/id_rsa')], { publicKeyExists: () => Promise.resolve(false) });
    expect(noPub.signingKey).toBeNull();
    expect(noPub.warnings[0]).toContain('ssh-keygen -y -f /home/u/.ssh/id_rsa > /home/u/.ssh/id_rsa.pub');

    const literal = await overrides([...ssh, entry('user.signingkey', 'key::ssh-ed25519 AAAAC3Nza test')]);
    expect(literal.signingKey).toBeNull();
    expect(literal.settings).toEqual([]);
  });

  it('warns with a remedy when commits are signed with OpenPGP, which cannot sign in the sandbox', async () => {
    const result = await overrides([entry('commit.gpgsign', 'true'), entry('user.signingkey', 'ABCDEF')]);
    expect(result.sshSigning).toBe(false);
    expect(result.warnings).toEqual([
      'git: commits are signed with gpg.format=openpgp, which cannot sign in the sandbox (no gpg agent is forwarded), so commits fail (remedy: sign with SSH keys, gpg.format=ssh, or commit with `git -c commit.gpgsign=false` in the sandbox)',
    ]);
  });

  it('names files the config gives by ~/ paths where any container user finds them', async () => {
    const result = await overrides([entry('core.excludesfile', '~/.gitignore_global'), entry('commit.template', '/etc/git-template')]);
    expect(result.settings).toEqual([{ section: 'core', key: 'excludesfile', value: '/run/sandboxd/git/home/.gitignore_global' }]);
  });

  it('names the mounted known_hosts in core.sshCommand unless the user set a portable one', async () => {
    const knownHosts = ['/run/sandboxd/known_hosts/known_hosts', '/run/sandboxd/known_hosts/known_hosts2'];
    const fresh = await overrides([], { knownHosts });
    expect(fresh.settings).toEqual([
      { section: 'core', key: 'sshCommand', value: "ssh -o UserKnownHostsFile='/run/sandboxd/known_hosts/known_hosts /run/sandboxd/known_hosts/known_hosts2'" },
    ]);
    expect((await overrides([entry('core.sshcommand', 'ssh -v')], { knownHosts })).settings).toEqual([]);
    const hostOnly = await overrides([entry('core.sshcommand', '/Applications/Tailscale.app/Contents/MacOS/ssh')], { knownHosts: [] });
    expect(hostOnly.settings).toEqual([{ section: 'core', key: 'sshCommand', value: 'ssh' }]);
  });
});

describe('renderGlobalConfig', () => {
  it('includes the user files in order, then safe.directory and overrides, quoted for git', () => {
    const text = renderGlobalConfig({
      includes: ['/home/u/.config/git/config', '/Users/me/My "odd" dir/.gitconfig'],
      safeDirectories: ['/src/wt'],
      settings: [
        { section: 'credential', key: 'helper', value: '' },
        { section: 'gpg', subsection: 'ssh', key: 'program', value: 'ssh-keygen' },
      ],
    });
    expect(text).toBe(
      [
        '# Generated by sandboxd for one sandbox session; read-only in the container.',
        '[include]',
        '\tpath = "/home/u/.config/git/config"',
        '[include]',
        '\tpath = "/Users/me/My \\"odd\\" dir/.gitconfig"',
        '[safe]',
        '\tdirectory = "/src/wt"',
        '[credential]',
        '\thelper = ""',
        '[gpg "ssh"]',
        '\tprogram = "ssh-keygen"',
        '',
      ].join('\n'),
    );
  });
});

describe('gitFactsWatched', () => {
  const input = { hostHome: '/home/u', cwd: '/src/app', path: '/usr/bin', xdgConfigHome: undefined };
  const facts = (repo: GitRepo | null): GitHostFacts => ({
    configFiles: [{ path: '/home/u/.gitconfig', source: '/home/u/.gitconfig' }, { path: '/home/u/.gitconfig-work', source: '/home/u/.gitconfig-work' }],
    includes: ['/home/u/.gitconfig'],
    overrides: null,
    signingKey: null,
    knownHosts: [],
    repo,
    warnings: [],
  });
  // Only what the watched list reads of a repository: the layout reader names its own paths.
  const plain = { watched: ['/src/app', '/src/app/.git', '/src/app/.git/config'] } as unknown as GitRepo;

  it('names each file once: what git reads, what it would read if it appeared, and what the layout reader walked', () => {
    expect(gitFactsWatched(input, facts(plain))).toEqual([
      '/home/u/.gitconfig',
      '/home/u/.config/git/config',
      '/home/u/.gitconfig-work',
      '/home/u/.ssh/known_hosts',
      '/home/u/.ssh/known_hosts2',
      '/src/app',
      '/src/app/.git',
      '/src/app/.git/config',
    ]);
    // Without a repository, every directory git's discovery would look at: a `.git` there changes the answer.
    expect(gitFactsWatched(input, facts(null)).slice(5)).toEqual(['/src/app', '/src', '/']);
  });
});
