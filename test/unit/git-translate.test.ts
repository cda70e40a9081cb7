import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entriesByFile, parseConfigList, type ConfigEntry } from '../../daemon/plan/git/git-config.js';
import { renderGlobalConfig } from '../../daemon/plan/git/git-global.js';
import { includedFile, repositoryHomePaths, translateConfig, type TranslateInput } from '../../daemon/plan/git/git-translate.js';
import { readUserConfig } from '../../daemon/plan/git/git-user-config.js';
import { sandboxPath } from '../../daemon/plan/git/git.js';
import { runSubprocess } from '../../daemon/os/subprocess.js';
import { comparable, COMPARE_SCRIPT, EXPECTED_EMAIL, makeRepos, writeRealisticHome, type RepoName } from '../lab/git-homes.js';

const entry = (key: string, value: string | null): ConfigEntry => ({ scope: 'command', file: '/home/u/.gitconfig', key, value });

function translate(entries: ConfigEntry[], extra: Partial<TranslateInput> = {}) {
  return translateConfig({
    file: '/home/u/.gitconfig',
    realFile: '/data/u/dotfiles/gitconfig',
    entries,
    hostHome: '/home/u',
    realHome: '/data/u',
    sandboxPath: (file) => sandboxPath(file, '/home/u'),
    ...extra,
  });
}

const values = (result: ReturnType<typeof translate>) => result.settings.map((setting) => [setting.section, setting.subsection ?? null, setting.key, setting.value]);

describe('translateConfig: paths', () => {
  it('names every file-valued key\'s ~/ and absolute paths where the sandbox mounts them; relative ones stay relative to the cwd', () => {
    const keys = [
      'core.excludesfile',
      'core.attributesfile',
      'commit.template',
      'mailmap.file',
      'blame.ignorerevsfile',
      'diff.orderfile',
      'format.signaturefile',
      'fsck.skiplist',
      'fetch.fsck.skiplist',
      'receive.fsck.skiplist',
      'gpg.ssh.allowedsignersfile',
      'gpg.ssh.revocationfile',
      'http.sslcainfo',
      'http.sslcert',
      'http.https://corp.example.com/.sslcainfo',
    ];
    const result = translate(keys.map((key, index) => entry(key, `~/files/${String(index)}`)));
    expect(result.settings.map((setting) => setting.value)).toEqual(keys.map((_, index) => `/run/sandboxd/git/home/files/${String(index)}`));
    expect(result.named).toEqual(keys.map((key, index) => ({ path: `/home/u/files/${String(index)}`, key, kind: 'file' })));
    expect(result.warnings).toEqual([]);

    const other = translate([entry('core.excludesfile', '/home/u/ignore'), entry('commit.template', '/etc/git/template'), entry('blame.ignorerevsfile', '.git-blame-ignore-revs'), entry('core.excludesfile', '~')]);
    expect(other.settings.map((setting) => setting.value)).toEqual(['/run/sandboxd/git/home/ignore', '/run/sandboxd/git/root/etc/git/template', '.git-blame-ignore-revs', '/run/sandboxd/git/home']);
    expect(other.named.map((file) => file.path)).toEqual(['/home/u/ignore', '/etc/git/template', '/home/u']);
  });

  it('secrets and directories are named where they would be, for the plan to warn about; safe.directory stays a host path', () => {
    const result = translate([
      entry('http.sslkey', '~/.certs/client.key'),
      entry('http.cookiefile', '~/.cookies'),
      entry('core.hookspath', '~/.githooks'),
      entry('init.templatedir', '~/.git-templates'),
      entry('safe.directory', '~/src/trusted'),
      entry('safe.directory', '*'),
    ]);
    expect(result.settings.map((setting) => setting.value)).toEqual([
      '/run/sandboxd/git/home/.certs/client.key',
      '/run/sandboxd/git/home/.cookies',
      '/run/sandboxd/git/home/.githooks',
      '/run/sandboxd/git/home/.git-templates',
      '/home/u/src/trusted',
      '*',
    ]);
    expect(result.named.map((file) => file.kind)).toEqual(['secret', 'secret', 'directory', 'directory']);
  });

  it('a signing key file becomes its public half; key literals and OpenPGP ids stay', () => {
    const result = translate([
      entry('user.signingkey', '~/.ssh/id_ed25519'),
      entry('user.signingkey', '~/.ssh/id_ed25519.pub'),
      entry('user.signingkey', 'key::ssh-ed25519 AAAAC3Nza test'),
      entry('user.signingkey', 'ssh-ed25519 AAAAC3Nza test'),
      entry('user.signingkey', 'ABCDEF0123456789'),
    ]);
    expect(result.settings.map((setting) => setting.value)).toEqual([
      '/run/sandboxd/git/home/.ssh/id_ed25519.pub',
      '/run/sandboxd/git/home/.ssh/id_ed25519.pub',
      'key::ssh-ed25519 AAAAC3Nza test',
      'ssh-ed25519 AAAAC3Nza test',
      'ABCDEF0123456789',
    ]);
    expect(result.named).toEqual([
      { path: '/home/u/.ssh/id_ed25519.pub', key: 'user.signingkey', kind: 'signing-key' },
      { path: '/home/u/.ssh/id_ed25519.pub', key: 'user.signingkey', kind: 'signing-key' },
    ]);
  });

  it('another user\'s home cannot be reproduced: said, and the value left as it is', () => {
    const result = translate([entry('core.excludesfile', '~bob/ignore')]);
    expect(values(result)).toEqual([['core', null, 'excludesfile', '~bob/ignore']]);
    expect(result.warnings).toEqual(['git: /home/u/.gitconfig: core.excludesfile "~bob/ignore" names another user\'s home, which the sandbox does not have']);
  });

  it('keeps everything else as it is, in order, keys without a value included', () => {
    const result = translate([entry('user.name', 'Me'), entry('url.git@github.com:.insteadof', 'https://github.com/'), entry('alias.who', '!git var GIT_AUTHOR_IDENT'), entry('core.bare', null)]);
    expect(values(result)).toEqual([
      ['user', null, 'name', 'Me'],
      ['url', 'git@github.com:', 'insteadof', 'https://github.com/'],
      ['alias', null, 'who', '!git var GIT_AUTHOR_IDENT'],
      ['core', null, 'bare', null],
    ]);
  });
});

describe('translateConfig: includes and conditions', () => {
  it('include paths: ~/ against HOME, relative next to the including file as git names it (not its realpath)', () => {
    const result = translate([entry('include.path', '~/.config/git/identity'), entry('include.path', 'inc/a.inc'), entry('include.path', '../shared/b.inc'), entry('include.path', '/etc/gitconfig.d/team')]);
    expect(result.settings.map((setting) => setting.value)).toEqual([
      '/run/sandboxd/git/home/.config/git/identity',
      '/run/sandboxd/git/home/inc/a.inc',
      '/run/sandboxd/git/root/home/shared/b.inc',
      '/run/sandboxd/git/root/etc/gitconfig.d/team',
    ]);
    expect(result.named.map((file) => [file.path, file.kind])).toEqual([
      ['/home/u/.config/git/identity', 'include'],
      ['/home/u/inc/a.inc', 'include'],
      ['/home/u/../shared/b.inc', 'include'],
      ['/etc/gitconfig.d/team', 'include'],
    ]);
  });

  it('gitdir: ~ is the realpath of HOME, ./ the directory of the file\'s realpath (glob characters escaped), the rest as written', () => {
    const key = (condition: string) => entry(`includeif.${condition}.path`, 'x.inc');
    const result = translate(
      [key('gitdir:~/work/'), key('gitdir/i:~/Work/'), key('gitdir:./src/'), key('gitdir:/abs/repo/'), key('gitdir:work/'), key('gitdir:~'), key('onbranch:release/**'), key('hasconfig:remote.*.url:https://github.com/acme/**')],
      { realFile: '/data/u/dot[files]*/gitconfig' },
    );
    expect(result.settings.map((setting) => setting.subsection)).toEqual([
      'gitdir:/data/u/work/',
      'gitdir/i:/data/u/Work/',
      'gitdir:/data/u/dot\\[files\\]\\*/src/',
      'gitdir:/abs/repo/',
      'gitdir:work/',
      'gitdir:/data/u',
      'onbranch:release/**',
      'hasconfig:remote.*.url:https://github.com/acme/**',
    ]);
    expect(result.warnings).toEqual([]);
  });

  it('a condition it cannot reproduce leaves that include out, and says so', () => {
    const result = translate([entry('includeif.gitdir:~bob/work/.path', 'x.inc'), entry('includeif.future:thing.path', 'y.inc'), entry('include.path', '~bob/z.inc'), entry('user.name', 'kept')]);
    expect(values(result)).toEqual([['user', null, 'name', 'kept']]);
    expect(result.named).toEqual([]);
    expect(result.warnings).toEqual([
      'git: /home/u/.gitconfig: includeif.gitdir:~bob/work/.path is left out of the sandbox: its condition "gitdir:~bob/work/" names another user\'s home',
      'git: /home/u/.gitconfig: includeif.future:thing.path is left out of the sandbox: sandboxd does not know its condition "future:thing"',
      'git: /home/u/.gitconfig: include.path "~bob/z.inc" is left out of the sandbox: it names a file outside your home\'s reach (another user\'s home or git\'s install prefix)',
    ]);
  });
});

describe('the repository\'s own config', () => {
  it('is mounted as it is, so a ~/ path in it is said to resolve against the container\'s HOME', () => {
    const local = (key: string, value: string): ConfigEntry => ({ scope: 'local', file: '/src/app/.git/config', key, value });
    expect(
      repositoryHomePaths([
        local('include.path', '~/.gitconfig-project'),
        local('includeif.onbranch:main.path', '~/main.inc'),
        local('core.excludesfile', '~/ignore'),
        local('user.email', '~me'),
        local('include.path', '../shared.inc'),
        { ...local('include.path', '~/global'), scope: 'global' },
      ]),
    ).toEqual([
      'git: /src/app/.git/config: include.path "~/.gitconfig-project" is resolved against the container\'s HOME in the sandbox, not yours (remedy: name it by its absolute path)',
      'git: /src/app/.git/config: includeif.onbranch:main.path "~/main.inc" is resolved against the container\'s HOME in the sandbox, not yours (remedy: name it by its absolute path)',
      'git: /src/app/.git/config: core.excludesfile "~/ignore" is resolved against the container\'s HOME in the sandbox, not yours (remedy: name it by its absolute path)',
    ]);
  });
});

/**
 * The translation checked with real git, without a container: the sandbox's layout is laid out in
 * a directory (what the plan would mount, where), and git is run with another HOME and
 * GIT_CONFIG_GLOBAL at the generated file, against git on the host with the user's HOME. HOME is
 * a symlink here, as it can be, so that `~` in a condition (its realpath) and in a path (as it is)
 * differ.
 */
describe('the translated config means what the host\'s means (real git, the sandbox laid out in a directory)', () => {
  let dir: string;
  let home: string;
  let sandbox: string;
  let repos: Record<RepoName, string>;
  const hostEnv = () => ({ HOME: home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' });
  const sandboxEnv = () => ({ HOME: path.join(dir, 'elsewhere'), GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: path.join(sandbox, 'config'), PATH: process.env.PATH ?? '' });

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-translate-'));
    const realHome = path.join(dir, 'real-home');
    mkdirSync(realHome);
    mkdirSync(path.join(dir, 'elsewhere'));
    home = path.join(dir, 'home');
    symlinkSync(realHome, home);
    writeRealisticHome(home, 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnlyForComparison test\n');
    repos = await makeRepos(home);
    sandbox = path.join(dir, 'sandbox');
    const toSandbox = (file: string) => sandboxPath(file, home).replace('/run/sandboxd/git', sandbox);
    // As the daemon does: what the host's git listed in one repository (where some conditions
    // hold), the rest read by git one file at a time.
    const listing = await execa('git', ['config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], { cwd: repos.work, env: hostEnv(), extendEnv: false });
    const global = parseConfigList(listing.stdout).filter((entry) => entry.scope === 'global');
    const listed = entriesByFile(global, (entry) => includedFile(entry, home));
    expect([...listed.keys()].map((file) => path.relative(home, file))).toEqual(['.config/git/config', '.gitconfig', '.config/git/identity', '.config/git/more/deep.inc', '.config/git/work']);
    const user = await readUserConfig({ listed, git: 'git', env: hostEnv(), hostHome: home, xdgConfigHome: path.join(home, '.config'), sandboxPath: toSandbox, run: runSubprocess });
    expect(user.warnings).toEqual([]);
    for (const config of user.configs) {
      mkdirSync(path.dirname(config.target), { recursive: true });
      writeFileSync(config.target, config.content);
    }
    for (const file of user.files) {
      mkdirSync(path.dirname(file.target), { recursive: true });
      copyFileSync(file.source, file.target);
    }
    const includes = user.configs.filter((config) => config.topLevel).map((config) => config.target);
    writeFileSync(path.join(sandbox, 'config'), renderGlobalConfig({ includes, safeDirectories: [], settings: [] }).text);
  });

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  const script = async (cwd: string, env: Record<string, string>) => (await execa('sh', ['-c', COMPARE_SCRIPT], { cwd, env, extendEnv: false })).stdout;

  it.each(Object.keys(EXPECTED_EMAIL) as RepoName[])('%s: the same config, files, identity, alias, insteadOf, excludes and attributes', async (name) => {
    // On the host the shell's cwd goes through the symlinked HOME; in the container it is canonical.
    const host = comparable(await script(repos[name], hostEnv()));
    const inside = comparable(await script(path.join(dir, 'real-home', path.relative(home, repos[name])), sandboxEnv()));
    expect(host.sections.ident).toEqual([`Inc User <${EXPECTED_EMAIL[name]}>`]);
    expect(inside.sections).toEqual(host.sections);
    expect(host.safe).toEqual(['~/src/trusted']);
    expect(inside.safe).toEqual([path.join(home, 'src/trusted')]);
  });

  it('onbranch: follows a branch switch', async () => {
    const cwd = repos.plain;
    await execa('git', ['checkout', '-q', '-b', 'release/1'], { cwd, env: hostEnv() });
    const ident = async (env: Record<string, string>) => (await execa('git', ['var', 'GIT_AUTHOR_IDENT'], { cwd, env, extendEnv: false })).stdout.split('>')[0];
    expect(await ident(sandboxEnv())).toBe('Inc User <release@x.test');
    expect(await ident(hostEnv())).toBe('Inc User <release@x.test');
    await execa('git', ['checkout', '-q', 'main'], { cwd, env: hostEnv() });
    expect(await ident(sandboxEnv())).toBe('Inc User <i@x.test');
  });
});

describe('readUserConfig: what the sandbox cannot reproduce is said, naming the file (real git)', () => {
  let dir: string;
  let home: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-userconfig-'));
    home = path.join(dir, 'home');
    mkdirSync(path.join(home, '.ssh'), { recursive: true });
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  const read = () =>
    readUserConfig({
      listed: new Map(),
      git: 'git',
      env: { HOME: home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' },
      hostHome: home,
      xdgConfigHome: path.join(home, '.config'),
      sandboxPath: (file) => sandboxPath(file, home),
      run: runSubprocess,
    });

  it('an include that is not a regular file (a FIFO is never opened) or not valid config is left out with a warning; a missing one is nothing', async () => {
    await execa('mkfifo', [path.join(home, 'fifo.inc')]);
    writeFileSync(path.join(home, 'broken.inc'), '[user\n\tname = x\n');
    writeFileSync(
      path.join(home, '.gitconfig'),
      '[includeIf "onbranch:a"]\n\tpath = fifo.inc\n[includeIf "onbranch:b"]\n\tpath = broken.inc\n\tpath = ~/.git-credentials\n[include]\n\tpath = missing.inc\n[user]\n\tname = Me\n',
    );
    writeFileSync(path.join(home, '.git-credentials'), 'https://user:token@example.com\n');
    const user = await read();
    expect(user.configs.map((config) => config.path)).toEqual([path.join(home, '.gitconfig')]);
    expect(user.warnings).toEqual([
      `git: the config file ${home}/fifo.inc is not a readable regular file; the sandbox goes without its settings`,
      expect.stringMatching(new RegExp(`^git: the config file ${home}/broken.inc cannot be read by git \\(.*\\); the sandbox goes without its settings$`)),
    ]);
    // Present or not, every file named is watched, so one that appears is read at the next acquire.
    expect(user.watched).toEqual(expect.arrayContaining([path.join(home, 'missing.inc'), path.join(home, '.config/git/config')]));
    expect(user.watched).not.toContain(path.join(home, '.git-credentials'));
  });

  it('files holding credentials, directories and private keys are not mounted, each said; public ones are', async () => {
    writeFileSync(path.join(home, '.ssh', 'id_ed25519'), 'PRIVATE');
    writeFileSync(path.join(home, '.ssh', 'id_ed25519.pub'), 'ssh-ed25519 AAAA test\n');
    writeFileSync(path.join(home, 'client.key'), 'PRIVATE');
    writeFileSync(path.join(home, 'ca.pem'), 'CERT');
    mkdirSync(path.join(home, '.githooks'), { recursive: true });
    writeFileSync(
      path.join(home, '.gitconfig'),
      [
        '[http "https://corp.example.com/"]',
        '\tsslKey = ~/client.key',
        '\tsslCAInfo = ~/ca.pem',
        '[core]',
        '\thooksPath = ~/.githooks',
        '[commit]',
        '\ttemplate = ~/.ssh/id_ed25519',
        '[user]',
        '\tsigningKey = ~/.ssh/id_ed25519',
        '',
      ].join('\n'),
    );
    const user = await read();
    expect(user.files.map((file) => [file.source, file.target, file.purpose])).toEqual([
      [path.join(home, 'ca.pem'), '/run/sandboxd/git/home/ca.pem', 'git http.https://corp.example.com/.sslcainfo file'],
      [path.join(home, '.ssh/id_ed25519.pub'), '/run/sandboxd/git/home/.ssh/id_ed25519.pub', 'git signing key (public)'],
    ]);
    expect(user.warnings).toEqual([
      `git: http.https://corp.example.com/.sslkey names ${home}/client.key, which holds a credential; it is not mounted, so git in the sandbox goes without it`,
      `git: core.hookspath names the directory ${home}/.githooks, which is not mounted; to use it in the sandbox, mount it read-only at /run/sandboxd/git/home/.githooks (--mount ${home}/.githooks:/run/sandboxd/git/home/.githooks:ro)`,
      `git: commit.template names ${home}/.ssh/id_ed25519; files in ~/.ssh other than public keys, known_hosts and allowed signers are never mounted`,
    ]);
  });

  it('follows includes to git\'s depth of 10 and no further, and a cycle once', async () => {
    const chain = Array.from({ length: 12 }, (_, index) => path.join(home, `chain${String(index)}.inc`));
    chain.forEach((file, index) => {
      writeFileSync(file, `[include]\n\tpath = chain${String(index + 1)}.inc\n\tpath = .gitconfig\n`);
    });
    writeFileSync(path.join(home, '.gitconfig'), '[include]\n\tpath = chain0.inc\n');
    const user = await read();
    expect(user.configs.map((config) => path.basename(config.path))).toEqual(['.gitconfig', ...chain.slice(0, 10).map((file) => path.basename(file))]);
    expect(user.warnings).toEqual([]);
  });
});

describe('entriesByFile: each file\'s own entries, read off a listing with includes followed (real git)', () => {
  it('matches git reading each file alone, with a file included twice, an include in the middle of a file, an empty one and a missing one', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-byfile-'));
    try {
      const home = path.join(dir, 'home');
      const files: Record<string, string> = {
        '.config/git/config': '[color]\n\tui = auto\n[include]\n\tpath = ~/shared.inc\n[xdg]\n\tafter = 1\n',
        '.gitconfig': '[user]\n\tname = Me\n[include]\n\tpath = inc/middle.inc\n[user]\n\temail = me@x.test\n[include]\n\tpath = ~/shared.inc\n\tpath = empty.inc\n\tpath = missing.inc\n[includeIf "onbranch:nowhere"]\n\tpath = inc/never.inc\n[top]\n\tlast = 1\n',
        'shared.inc': '[shared]\n\tvalue = s\n',
        'inc/middle.inc': '[middle]\n\tbefore = 1\n[include]\n\tpath = ../shared.inc\n\tpath = deeper.inc\n[middle]\n\tafter = 1\n',
        'inc/deeper.inc': '[deeper]\n\tvalue = d\n',
        'inc/never.inc': '[never]\n\tvalue = n\n',
        'empty.inc': '',
      };
      for (const [name, content] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(home, name)), { recursive: true });
        writeFileSync(path.join(home, name), content);
      }
      const env = { HOME: home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' };
      const listing = await execa('git', ['config', '--list', '--show-origin', '--show-scope', '--includes', '-z'], { cwd: dir, env, extendEnv: false });
      const byFile = entriesByFile(parseConfigList(listing.stdout), (entry) => includedFile(entry, home));
      // git names a file by the path it opened: `inc/../shared.inc` is another name for shared.inc.
      expect([...byFile.keys()]).toEqual(['.config/git/config', 'shared.inc', '.gitconfig', 'inc/middle.inc', 'inc/../shared.inc', 'inc/deeper.inc'].map((name) => `${home}/${name}`));
      for (const [file, entries] of byFile) {
        const alone = await execa('git', ['config', '--file', file, '--list', '--show-origin', '--show-scope', '-z'], { env, extendEnv: false });
        expect(entries.map(({ key, value }) => ({ key, value })), file).toEqual(parseConfigList(alone.stdout).map(({ key, value }) => ({ key, value })));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
