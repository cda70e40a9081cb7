import { describe, expect, it } from 'vitest';
import type { ConfigEntry } from '../../daemon/plan/git/git-config.js';
import { renderGlobalConfig } from '../../daemon/plan/git/git-global.js';
import { sandboxOverrides, type OverrideInput } from '../../daemon/plan/git/git-overrides.js';
import { gitFactsWatched, type GitHostFacts } from '../../daemon/plan/git/git-host.js';
import { planGitSection } from '../../daemon/plan/git/git-section.js';
import { planGit, sandboxPath, type GitPlanInput, type GitRepo, type SandboxGitDir } from '../../daemon/plan/git/git.js';

const readonlyPolicy = { hooks: 'readonly', config: 'readonly' } as const;

describe('planGit', () => {
  const base: GitPlanInput = {
    hostHome: '/home/u',
    containerHome: '/root',
    homeFiles: [{ path: '/home/u/.gitconfig', source: '/rt/git/t1.gitconfig' }],
    files: [
      { source: '/home/u/dotfiles/gitconfig', target: '/home/u/dotfiles/gitconfig', purpose: 'git config' },
      { source: '/rt/git/t1.gitconfig', target: '/run/sandboxd/git/home/.gitconfig', purpose: 'git config from /home/u/.gitconfig' },
      { source: '/home/u/.ssh/id_ed25519.pub', target: '/run/sandboxd/git/home/.ssh/id_ed25519.pub', purpose: 'git signing key (public)' },
    ],
    repo: null,
    sandbox: null,
    policy: readonlyPolicy,
    emptyDir: '/rt/empty',
    globalConfig: '/rt/git/abc.gitconfig',
    knownHosts: [{ path: '/home/u/.ssh/known_hosts', source: '/home/u/.ssh/known_hosts' }],
    relabel: undefined,
  };

  it('points GIT_CONFIG_GLOBAL at the generated file; mounts the files, the top-level ones at both homes too, and known_hosts, all read-only', () => {
    const plan = planGit(base);
    expect(plan.env).toEqual({ GIT_DISCOVERY_ACROSS_FILESYSTEM: '1', GIT_CONFIG_GLOBAL: '/run/sandboxd/git/config' });
    expect(plan.mounts.map((m) => [m.source, m.target, m.readOnly])).toEqual([
      ['/home/u/dotfiles/gitconfig', '/home/u/dotfiles/gitconfig', true],
      ['/rt/git/t1.gitconfig', '/run/sandboxd/git/home/.gitconfig', true],
      ['/home/u/.ssh/id_ed25519.pub', '/run/sandboxd/git/home/.ssh/id_ed25519.pub', true],
      ['/rt/git/t1.gitconfig', '/home/u/.gitconfig', true],
      ['/rt/git/t1.gitconfig', '/root/.gitconfig', true],
      ['/home/u/.ssh/known_hosts', '/run/sandboxd/known_hosts/known_hosts', true],
      ['/home/u/.ssh/known_hosts', '/root/.ssh/known_hosts', true],
      ['/rt/git/abc.gitconfig', '/run/sandboxd/git/config', true],
    ]);
  });

  it('without a known container HOME mounts only at host and fixed paths; without git, no generated config', () => {
    const plan = planGit({ ...base, containerHome: null, globalConfig: null });
    expect(plan.mounts.map((m) => m.target)).toEqual([
      '/home/u/dotfiles/gitconfig',
      '/run/sandboxd/git/home/.gitconfig',
      '/run/sandboxd/git/home/.ssh/id_ed25519.pub',
      '/home/u/.gitconfig',
      '/run/sandboxd/known_hosts/known_hosts',
    ]);
    expect(plan.env).toEqual({ GIT_DISCOVERY_ACROSS_FILESYSTEM: '1' });
  });
});

describe('sandboxPath', () => {
  it('puts files under HOME in HOME\'s layout and the others under their absolute path, never over the image\'s own', () => {
    expect(sandboxPath('/home/u/.config/git/ignore', '/home/u')).toBe('/run/sandboxd/git/home/.config/git/ignore');
    expect(sandboxPath('/home/u/inc/../x', '/home/u')).toBe('/run/sandboxd/git/home/x');
    expect(sandboxPath('/home/u/..dotdot', '/home/u')).toBe('/run/sandboxd/git/home/..dotdot');
    expect(sandboxPath('/etc/ssl/corp.pem', '/home/u')).toBe('/run/sandboxd/git/root/etc/ssl/corp.pem');
    expect(sandboxPath('/home/other/x', '/home/u')).toBe('/run/sandboxd/git/root/home/other/x');
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
    xdgDefaults: [],
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
    expect(result.warnings).toEqual([]);
    expect(result.notices).toEqual([
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
    expect(result.warnings).toEqual([]);
    expect(result.notices).toHaveLength(3);
    expect(result.notices[2]).toBe('git: gpg.ssh.program "/Applications/1Password.app/Contents/MacOS/op-ssh-sign" is a host program; the sandbox signs with ssh-keygen through the forwarded agent');
  });

  it('SSH signing: the agent must reach the container; a private key path is said to sign through its .pub, or its missing .pub named with the remedy', async () => {
    const ssh = [entry('gpg.format', 'ssh'), entry('commit.gpgsign', 'true')];
    const pub = await overrides([...ssh, entry('user.signingkey', '~/.ssh/id_ed25519.pub')]);
    expect(pub.settings).toEqual([]);
    expect(pub.sshSigning).toBe(true);
    expect(pub.warnings).toEqual([]);

    const priv = await overrides([...ssh, entry('user.signingkey', '~/.ssh/id_ed25519')]);
    expect(priv.warnings).toEqual([]);
    expect(priv.notices[0]).toBe('git: user.signingkey names the private key /home/u/.ssh/id_ed25519; the sandbox signs with /home/u/.ssh/id_ed25519.pub through the agent (private keys are never mounted)');

    const noPub = await overrides([...ssh, entry('user.signingkey', '/home/u/.ssh/id_rsa')], { publicKeyExists: () => Promise.resolve(false) });
    expect(noPub.warnings[0]).toContain('ssh-keygen -y -f /home/u/.ssh/id_rsa > /home/u/.ssh/id_rsa.pub');

    const literal = await overrides([...ssh, entry('user.signingkey', 'key::ssh-ed25519 AAAAC3Nza test')]);
    expect(literal.settings).toEqual([]);
    expect(literal.warnings).toEqual([]);
  });

  it('warns with a remedy when commits are signed with OpenPGP, which cannot sign in the sandbox', async () => {
    const result = await overrides([entry('commit.gpgsign', 'true'), entry('user.signingkey', 'ABCDEF')]);
    expect(result.sshSigning).toBe(false);
    expect(result.warnings).toEqual([
      'git: commits are signed with gpg.format=openpgp, which cannot sign in the sandbox (no gpg agent is forwarded), so commits fail (remedy: sign with SSH keys, gpg.format=ssh, or commit with `git -c commit.gpgsign=false` in the sandbox)',
    ]);
  });

  it('names git\'s XDG ignore and attributes files when no key names others, and says so', async () => {
    const xdgDefaults = [
      { key: 'core.excludesfile', file: '/home/u/.config/git/ignore' },
      { key: 'core.attributesfile', file: '/home/u/.config/git/attributes' },
    ] as const;
    const result = await overrides([entry('core.excludesfile', '~/.gitignore_global')], { xdgDefaults });
    expect(result.settings).toEqual([{ section: 'core', key: 'attributesfile', value: '/run/sandboxd/git/home/.config/git/attributes' }]);
    expect(result.files).toEqual([xdgDefaults[1]]);
    expect(result.notices).toEqual([
      "git: core.attributesfile is set to /run/sandboxd/git/home/.config/git/attributes in the sandbox, where your /home/u/.config/git/attributes is mounted, since git would look for it under the container's HOME",
    ]);
  });

  it('names the mounted known_hosts in core.sshCommand unless the user set a portable one', async () => {
    const knownHosts = ['/run/sandboxd/known_hosts/known_hosts', '/run/sandboxd/known_hosts/known_hosts2'];
    const fresh = await overrides([], { knownHosts });
    const value = "ssh -o UserKnownHostsFile='/run/sandboxd/known_hosts/known_hosts /run/sandboxd/known_hosts/known_hosts2'";
    expect(fresh.settings).toEqual([{ section: 'core', key: 'sshCommand', value }]);
    expect(fresh.notices).toEqual([`git: core.sshCommand is set to "${value}" in the sandbox, so ssh trusts the hosts your known_hosts lists whatever the container user's HOME`]);
    expect((await overrides([entry('core.sshcommand', 'ssh -v')], { knownHosts })).settings).toEqual([]);
    const hostOnly = await overrides([entry('core.sshcommand', '/Applications/Tailscale.app/Contents/MacOS/ssh')], { knownHosts: [] });
    expect(hostOnly.settings).toEqual([{ section: 'core', key: 'sshCommand', value: 'ssh' }]);
    expect(hostOnly.notices).toEqual(['git: core.sshCommand "/Applications/Tailscale.app/Contents/MacOS/ssh" is a host program; the sandbox uses ssh']);
  });
});

describe('renderGlobalConfig', () => {
  it('includes the user files in order, then safe.directory and overrides, quoted for git', () => {
    const { text, refused } = renderGlobalConfig({
      includes: ['/run/sandboxd/git/home/.config/git/config', '/run/sandboxd/git/root/Users/me/My "odd" dir/.gitconfig'],
      safeDirectories: ['/src/wt'],
      settings: [
        { section: 'credential', key: 'helper', value: '' },
        { section: 'gpg', subsection: 'ssh', key: 'program', value: 'ssh-keygen' },
      ],
    });
    expect(refused).toEqual([]);
    expect(text).toBe(
      [
        '# Generated by sandboxd for one sandbox session; read-only in the container.',
        '[include]',
        '\tpath = "/run/sandboxd/git/home/.config/git/config"',
        '\tpath = "/run/sandboxd/git/root/Users/me/My \\"odd\\" dir/.gitconfig"',
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
    configs: [],
    files: [],
    namedPaths: [],
    git: '/usr/bin/git',
    plainHomeFiles: [],
    configWatched: ['/home/u/.config/git/config', '/home/u/.gitconfig', '/home/u/.gitconfig-work', '/home/u/.config/git/ignore'],
    overrides: null,
    knownHosts: [],
    repo,
    warnings: [],
  });
  // Only what the watched list reads of a repository: the layout reader names its own paths.
  const plain = { watched: ['/src/app', '/src/app/.git', '/src/app/.git/config'] } as unknown as GitRepo;

  it('names each file once: what git reads, what it would read if it appeared, and what the layout reader walked', () => {
    expect(gitFactsWatched(input, facts(plain))).toEqual([
      '/home/u/.config/git/config',
      '/home/u/.gitconfig',
      '/home/u/.gitconfig-work',
      '/home/u/.config/git/ignore',
      '/home/u/.ssh/known_hosts',
      '/home/u/.ssh/known_hosts2',
      '/src/app',
      '/src/app/.git',
      '/src/app/.git/config',
    ]);
    // Without a repository, every directory git's discovery would look at: a `.git` there changes the answer.
    expect(gitFactsWatched(input, facts(null)).slice(6)).toEqual(['/src/app', '/src', '/']);
  });
});

const SANDBOX: SandboxGitDir = {
  source: '/state/git-dirs/k/s',
  target: '/home/u/src/app/.git',
  files: [
    { source: '/state/git-dirs/k/ro/a.config', target: '/home/u/src/app/.git/config', kind: 'config' },
    { source: '/state/git-dirs/k/ro/a.alternates', target: '/home/u/src/app/.git/objects/info/alternates', kind: 'alternates' },
  ],
  hooks: ['/home/u/src/app/.git/hooks'],
  objects: [{ source: '/home/u/src/app/.git/objects', target: '/run/sandboxd/git/objects/0123' }],
  coveredAlternates: [],
  emptyFile: '/state/git-dirs/k/ro/empty',
  pins: { selfBinds: [], readOnly: [], empty: [] },
};

describe('planGitSection', () => {
  // A plain clone with nothing in its git dir: the repository's own mounts have their tests in git-repo.test.ts.
  const dir = '/home/u/src/app/.git';
  const repo: GitRepo = {
    topLevel: '/home/u/src/app',
    gitDir: dir,
    commonDir: dir,
    kind: 'plain',
    dotGit: dir,
    facts: { dir, entry: { path: dir, kind: 'dir', identity: '1:1', ctimeMs: 0, size: 0 }, commondir: null, config: null, configWorktree: null, hooks: null, alternates: null, worktrees: [], modules: [], oddities: [], truncated: false, dirs: [dir] },
    outer: { commonDir: dir, facts: { dir, entry: { path: dir, kind: 'dir', identity: '1:1', ctimeMs: 0, size: 0 }, commondir: null, config: null, configWorktree: null, hooks: null, alternates: null, worktrees: [], modules: [], oddities: [], truncated: false, dirs: [dir] } },
    worktrees: [],
    submodules: [],
    hooksPaths: [],
    includes: [],
    pendingIncludes: [],
    unguardable: { hooks: [], config: [] },
    watched: [dir],
  };
  const facts: GitHostFacts = {
    configs: [
      { path: '/home/u/.gitconfig', source: '/home/u/dotfiles/gitconfig', target: '/run/sandboxd/git/home/.gitconfig', content: 'top', topLevel: true },
      { path: '/home/u/.config/git/work', source: '/home/u/.config/git/work', target: '/run/sandboxd/git/home/.config/git/work', content: 'work', topLevel: false },
    ],
    files: [{ source: '/home/u/.gitignore', target: '/run/sandboxd/git/home/.gitignore', purpose: 'git core.excludesfile file' }],
    namedPaths: [],
    git: '/usr/bin/git',
    plainHomeFiles: [],
    configWatched: [],
    overrides: { settings: [{ section: 'credential', subsection: 'https://a\tb', key: 'helper', value: '' }], warnings: [], notices: ['git: credential helper "x" for https://a\tb is a host program; it is reset in the sandbox'], files: [], sshSigning: false },
    knownHosts: [],
    repo,
    warnings: ['git: a warning of the facts'],
  };

  it('stores each translation and the generated config; mounts the originals first, then the translations, the named files, dual HOME; names every override', async () => {
    const stored = new Map<string, string>();
    const section = await planGitSection({
      facts,
      hostHome: '/home/u',
      containerHome: '/root',
      policy: { hooks: 'writable', config: 'writable' },
      sandbox: SANDBOX,
      emptyDir: '/rt/empty',
      relabel: undefined,
      agentForwarded: false,
      writeGlobalConfig: (content) => {
        const file = `/rt/git/${String(stored.size)}.gitconfig`;
        stored.set(content, file);
        return Promise.resolve(file);
      },
    });
    expect(stored.get('top')).toBeDefined();
    expect(stored.get('work')).toBeDefined();
    const generated = [...stored.keys()].find((content) => content.startsWith('# Generated'));
    expect(generated).toContain('[include]\n\tpath = "/run/sandboxd/git/home/.gitconfig"\n[safe]\n\tdirectory = "/home/u/src/app"\n\tdirectory = "/home/u/src/app/.git"\n[credential "https://a\tb"]\n\thelper = ""\n');
    const top = stored.get('top') ?? '';
    const work = stored.get('work') ?? '';
    expect(section.mounts.filter((m) => !m.purpose.startsWith('repository ')).map((m) => `${m.source} -> ${m.target}`)).toEqual([
      '/home/u/dotfiles/gitconfig -> /home/u/dotfiles/gitconfig',
      '/home/u/.config/git/work -> /home/u/.config/git/work',
      `${top} -> /run/sandboxd/git/home/.gitconfig`,
      `${work} -> /run/sandboxd/git/home/.config/git/work`,
      '/home/u/.gitignore -> /run/sandboxd/git/home/.gitignore',
      `${top} -> /home/u/.gitconfig`,
      `${top} -> /root/.gitconfig`,
      `${stored.get(generated ?? '') ?? ''} -> /run/sandboxd/git/config`,
    ]);
    // The sandbox's own git dir at the repository's, and nothing of the host's writable; its config and hooks writable as asked.
    expect(section.mounts.filter((m) => !m.readOnly).map((m) => `${m.source} -> ${m.target}`)).toEqual([`/state/git-dirs/k/s -> ${dir}`]);
    expect(section.mounts.filter((m) => m.purpose.startsWith('repository ') && m.readOnly).map((m) => `${m.source} -> ${m.target}`)).toEqual([
      `/state/git-dirs/k/ro/a.alternates -> ${dir}/objects/info/alternates`,
      `${dir}/objects -> /run/sandboxd/git/objects/0123`,
    ]);
    // What needs no action is a notice: the safe.directory and every override the config makes.
    expect(section.warnings).toEqual(['git: a warning of the facts']);
    expect(section.notices).toEqual([
      'git: safe.directory is set to /home/u/src/app, /home/u/src/app/.git in the sandbox, so git trusts this repository whichever user owns it there',
      'git: credential helper "x" for https://a\tb is a host program; it is reset in the sandbox',
    ]);
  });
});
