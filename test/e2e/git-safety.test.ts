import { appendFileSync, chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, startAgent, type Agent, type Sandbox } from '../helpers.js';
import { startSshd, type Sshd } from '../lab/sshd.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** The host's git, as the user would run it next: no sandbox settings, but trusting the test's repos. */
function hostGit(cwd: string, ...args: string[]) {
  return execa('git', ['-c', 'safe.directory=*', ...args], { cwd, env: { HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' }, reject: false });
}

async function refs(repo: string): Promise<Map<string, string>> {
  const out = (await hostGit(repo, 'for-each-ref', '--format=%(refname) %(objectname)')).stdout;
  return new Map(out.split('\n').filter((line) => line !== '').map((line) => line.split(' ') as [string, string]));
}

/**
 * What git inside says when it would change the sandbox's read-only copies (README): deleting a
 * branch also drops its config section; pruning a worktree whose work tree is out of sight would
 * remove its registration, whose pointers are read-only (so it stays registered).
 */
const CONFIG_REFUSED = [
  (main: string) => `error: could not write config file ${main}/.git/config: Device or resource busy`,
  () => 'warning: Update of config-file failed',
  (main: string) => `error: failed to delete '${main}/.git/worktrees/other': Device or resource busy`,
];

const SETUP_IDENTITY = ['-c', 'user.name=Setup', '-c', 'user.email=setup@example.com', '-c', 'commit.gpgsign=false'];

/**
 * Shaped like a typical macOS ~/.gitconfig: identity, the Keychain credential helper, SSH commit
 * signing through 1Password's signer (a program that cannot exist in the container), and
 * known_hosts holding the lab sshd's key. No safe.directory: the sandbox must supply exactly that.
 */
function writeMacConfig(home: string, agent: Agent, sshd: Sshd): void {
  mkdirSync(path.join(home, '.ssh'), { recursive: true });
  writeFileSync(path.join(home, '.ssh', 'id_ed25519.pub'), readFileSync(`${agent.keyPath}.pub`));
  writeFileSync(path.join(home, '.ssh', 'config'), 'Host *\n  IdentityAgent "~/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock"\n');
  const hostKey = readFileSync(path.join(path.dirname(sshd.configPath), 'host_key.pub'), 'utf8').split(' ').slice(0, 2).join(' ');
  writeFileSync(path.join(home, '.ssh', 'known_hosts'), `[127.0.0.1]:${sshd.port} ${hostKey}\n`);
  writeFileSync(
    path.join(home, '.gitconfig'),
    [
      '[user]',
      '\tname = Mac User',
      '\temail = mac@example.com',
      '\tsigningkey = ~/.ssh/id_ed25519.pub',
      '[credential]',
      '\thelper = osxkeychain',
      '[gpg]',
      '\tformat = ssh',
      '[gpg "ssh"]',
      '\tprogram = /Applications/1Password.app/Contents/MacOS/op-ssh-sign',
      '[commit]',
      '\tgpgsign = true',
      '[init]',
      '\tdefaultBranch = main',
      '',
    ].join('\n'),
  );
}

describe.skipIf(labMissing)('git round two: no ref lost, host protected, any container user (real git, real containers)', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let agent: Agent;
  let sshd: Sshd;
  let src: string;

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    agent = await startAgent(sandbox.dir, cleanup);
    sshd = await startSshd(path.join(sandbox.dir, 'sshd'), cleanup);
    appendFileSync(path.join(sandbox.dir, 'sshd', 'authorized_keys'), readFileSync(`${agent.keyPath}.pub`));
    writeMacConfig(sandbox.home, agent, sshd);
    // The repositories sit in a directory every container user can traverse.
    chmodSync(sandbox.dir, 0o755);
    src = path.join(sandbox.dir, 'src');
    mkdirSync(src, { recursive: true });
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket });
    // No daemon is started here: the first `sandboxd run` auto-starts it, as for users.
  });

  function run(cwd: string, script: string, extra: string[] = [], runArgs: string[] = ['--network', 'none']) {
    return execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', ...extra, '--', '--rm', ...runArgs, image, 'sh', '-c', script], {
      cwd,
      env,
      extendEnv: false,
      reject: false,
      timeout: 90_000,
    });
  }

  /** A repository owned by `owner` (another uid than the container's root), with a linked worktree. */
  async function repoWithWorktree(name: string, owner: string) {
    const main = path.join(src, name, 'main');
    const wt = path.join(src, name, 'wt');
    const remote = path.join(src, name, 'remote.git');
    mkdirSync(main, { recursive: true });
    await hostGit(main, 'init', '-q', '-b', 'main');
    writeFileSync(path.join(main, 'file.txt'), 'one\n');
    await hostGit(main, 'add', '.');
    await hostGit(main, ...SETUP_IDENTITY, 'commit', '-q', '-m', 'init');
    for (const branch of ['b1', 'b2', 'b3']) await hostGit(main, 'branch', branch);
    await hostGit(main, 'tag', 'v0');
    await hostGit(main, 'worktree', 'add', '-q', '-b', 'feature', wt);
    await hostGit(main, 'worktree', 'add', '-q', '-b', 'other', path.join(src, name, 'other'));
    writeFileSync(path.join(wt, 'feature.txt'), 'feature\n');
    await hostGit(wt, 'add', '.');
    await hostGit(wt, ...SETUP_IDENTITY, 'commit', '-q', '-m', 'feature work');
    writeFileSync(path.join(main, 'file.txt'), 'two\n');
    await hostGit(main, ...SETUP_IDENTITY, 'commit', '-q', '-am', 'main moves on');
    await hostGit(src, 'clone', '-q', '--bare', main, remote);
    await hostGit(remote, 'branch', 'from-remote', 'main');
    await hostGit(main, 'remote', 'add', 'origin', remote);
    await execa('chown', ['-R', owner, path.join(src, name)]);
    // Only the sandbox's own repository is under test; the remote it fetches from is root's.
    await execa('chown', ['-R', '0:0', remote]);
    return { main, wt, remote };
  }

  it("linked worktree as root: pack-refs, branch -D, tag, stash, rebase, worktree list, fetch, gc in the sandbox's git dir; on the host nothing is lost, what the sandbox made comes home, status stays clean", async () => {
    const { main, wt, remote } = await repoWithWorktree('lw', '1000:1000');
    // Nothing is ever deleted on the host; remote-tracking refs stay the sandbox's (the host fetches for itself).
    const ops: { name: string; script: string; added?: string[]; changed?: string[] }[] = [
      { name: 'branch -D without packed-refs', script: 'git branch -D b3' },
      { name: 'pack-refs --all', script: 'git pack-refs --all' },
      { name: 'branch -D with packed-refs', script: 'git branch -D b1' },
      { name: 'tag', script: 'git tag v1', added: ['refs/tags/v1'] },
      { name: 'stash', script: 'echo dirty >> feature.txt && git stash', added: ['refs/stash'] },
      { name: 'rebase (the host has not moved feature: its history is rewritten by compare-and-swap)', script: 'git rebase -q main', changed: ['refs/heads/feature'] },
      { name: 'worktree list', script: 'git worktree list | grep -c "" | grep -qx 3' },
      { name: 'fetch from a local remote', script: 'git fetch -q origin' },
      { name: 'gc --prune=now', script: 'git gc -q --prune=now' },
      { name: 'worktree prune (the other work tree is out of sight)', script: 'git worktree prune && git worktree list | grep -c "" | grep -qx 3' },
      { name: 'pack-refs again after new loose refs', script: 'git branch late && git pack-refs --all', added: ['refs/heads/late'] },
    ];
    for (const op of ops) {
      const before = await refs(main);
      const result = await run(wt, op.script, [], ['--network', 'none', '--mount', `type=bind,src=${remote},dst=${remote},ro`]);
      // Deleting a branch also drops its config section, which a read-only config refuses (README).
      const stderr = result.stderr.split('\n').filter((line) => line !== '' && !CONFIG_REFUSED.some((known) => line === known(main)) && !line.startsWith('sandboxd: the sandbox rewrote feature'));
      expect({ op: op.name, code: result.exitCode, stderr }).toEqual({ op: op.name, code: 0, stderr: [] });
      const status = await hostGit(wt, 'status', '--porcelain');
      expect({ op: op.name, status: status.stdout, head: (await hostGit(wt, 'symbolic-ref', 'HEAD')).stdout }).toEqual({ op: op.name, status: '', head: 'refs/heads/feature' });
      const fsck = await hostGit(main, 'fsck', '--full', '--no-progress');
      expect({ op: op.name, fsck: fsck.exitCode, out: fsck.stderr }).toEqual({ op: op.name, fsck: 0, out: '' });
      const after = await refs(main);
      const expected = new Set(before.keys());
      for (const ref of op.added ?? []) expected.add(ref);
      expect({ op: op.name, refs: [...after.keys()].sort() }).toEqual({ op: op.name, refs: [...expected].sort() });
      for (const [ref, oid] of before) {
        if (after.has(ref) && !(op.changed ?? []).includes(ref)) expect({ op: op.name, ref, oid: after.get(ref) }).toEqual({ op: op.name, ref, oid });
      }
    }
    // The other worktree is still registered and whole, though its work tree was out of sight.
    const other = await hostGit(path.join(src, 'lw', 'other'), 'status', '--porcelain');
    expect({ code: other.exitCode, out: other.stdout }).toEqual({ code: 0, out: '' });
    // The rebased commit was made in the sandbox with the host identity, signed through the agent.
    const signed = await hostGit(main, 'cat-file', 'commit', 'feature');
    expect(signed.stdout).toContain('committer Mac User <mac@example.com>');
    expect(signed.stdout).toContain('-----BEGIN SSH SIGNATURE-----');
  });

  it('linked worktree: hooks, config and the other worktree\'s registration stay read-only', async () => {
    const { main, wt } = await repoWithWorktree('ro', '1000:1000');
    const common = path.join(main, '.git');
    const result = await run(
      wt,
      [
        `touch ${common}/hooks/post-commit 2>/dev/null && echo hooks-written || echo hooks-refused`,
        'git config --local core.hooksPath /tmp 2>/dev/null && echo config-written || echo config-refused',
        `echo /nowhere/.git > ${common}/worktrees/other/gitdir 2>/dev/null && echo other-written || echo other-refused`,
      ].join('; '),
    );
    expect(result.stdout.split('\n')).toEqual(['hooks-refused', 'config-refused', 'other-refused']);
  });

  async function plainRepo(name: string, owner: string): Promise<string> {
    const dir = path.join(src, name);
    mkdirSync(dir, { recursive: true });
    await hostGit(dir, 'init', '-q', '-b', 'main');
    writeFileSync(path.join(dir, 'file.txt'), 'hello\n');
    await hostGit(dir, 'add', '.');
    await hostGit(dir, ...SETUP_IDENTITY, 'commit', '-q', '-m', 'init');
    await execa('chown', ['-R', owner, dir]);
    return dir;
  }

  it("plain clone: the sandbox's copy of .git/config is read-only unless --git-config writable, and the host's is never written", async () => {
    const dir = await plainRepo('plain-config', '1000:1000');
    const locked = await run(dir, 'git config core.hooksPath /tmp/planted');
    expect(locked.exitCode).not.toBe(0);
    expect(locked.stderr).toBe('error: could not write config file .git/config: Device or resource busy');
    expect((await hostGit(dir, 'config', '--local', 'core.hooksPath')).stdout).toBe('');
    // Writable: the sandbox's own copy takes it (git push -u, remote add work inside); the host's config stays as it was.
    const open = await run(dir, 'git config core.hooksPath /tmp/planted && git config core.hooksPath', ['--git-config', 'writable']);
    expect(open.stdout).toBe('/tmp/planted');
    expect((await hostGit(dir, 'config', '--local', 'core.hooksPath')).stdout).toBe('');
  });

  it('--user 1000 alone: identity, a signed commit, no credential-helper error, overrides announced', async () => {
    const dir = await plainRepo('as-1000', '1000:1000');
    const result = await run(
      dir,
      [
        'echo "identity=$(git config user.name) <$(git config user.email)>"',
        'echo change >> file.txt',
        'git commit -q -am "signed in the sandbox" && echo committed',
        'printf "protocol=https\\nhost=example.com\\n\\n" | GIT_TERMINAL_PROMPT=0 git credential fill >/dev/null 2>/tmp/cred.err; cat /tmp/cred.err',
      ].join('; '),
      [],
      ['--network', 'none', '--user', '1000'],
    );
    const lines = result.stdout.split('\n');
    expect(lines).toContain('identity=Mac User <mac@example.com>');
    expect(lines).toContain('committed');
    expect(result.stdout).not.toContain('osxkeychain');
    expect(result.stdout).not.toContain('is not a git command');
    expect(result.stderr).toBe('');
    const commit = await hostGit(dir, 'cat-file', 'commit', 'HEAD');
    expect(commit.stdout).toContain('-----BEGIN SSH SIGNATURE-----');
    const allowed = path.join(sandbox.dir, 'allowed_signers');
    writeFileSync(allowed, `mac@example.com ${readFileSync(`${agent.keyPath}.pub`, 'utf8')}`);
    const verified = await hostGit(dir, '-c', `gpg.ssh.allowedSignersFile=${allowed}`, 'verify-commit', 'HEAD');
    expect(verified.stderr).toContain('Good "git" signature for mac@example.com');

    const plan = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--json'], { cwd: dir, env, extendEnv: false });
    // Overrides need no action: the plan names them as notices.
    const notices = (JSON.parse(plan.stdout) as { plan: { notices: string[] } }).plan.notices;
    expect(notices).toContain('git: credential helper "osxkeychain" is a host program; it is reset in the sandbox');
    expect(notices).toContain(
      'git: gpg.ssh.program "/Applications/1Password.app/Contents/MacOS/op-ssh-sign" is a host program; the sandbox signs with ssh-keygen through the forwarded agent',
    );
  });

  it("submodules: each one's hooks stay read-only, nested ones too; its config is the sandbox's copy (git submodule update writes it), which never reaches the host; work inside them still lands on the host", async () => {
    const deep = await plainRepo('sub-deep', '0:0');
    const lib = await plainRepo('sub-lib', '0:0');
    const submoduleAdd = ['-c', 'protocol.file.allow=always', ...SETUP_IDENTITY];
    await hostGit(lib, ...submoduleAdd, 'submodule', 'add', '-q', deep, 'deep');
    await hostGit(lib, ...SETUP_IDENTITY, 'commit', '-q', '-m', 'add deep');
    const superproject = await plainRepo('superproject', '0:0');
    await hostGit(superproject, ...submoduleAdd, 'submodule', 'add', '-q', lib, 'lib');
    await hostGit(superproject, ...SETUP_IDENTITY, 'commit', '-q', '-m', 'add lib');
    await hostGit(superproject, ...submoduleAdd, 'submodule', 'update', '-q', '--init', '--recursive');
    await execa('chown', ['-R', '1000:1000', superproject]);
    const modules = path.join(superproject, '.git', 'modules');
    const result = await run(
      superproject,
      [
        `touch ${modules}/lib/hooks/post-checkout 2>/dev/null && echo lib-hooks-written || echo lib-hooks-refused`,
        'git -C lib config core.hooksPath /tmp 2>/dev/null && echo lib-config-sandboxed || echo lib-config-refused',
        `touch ${modules}/lib/modules/deep/hooks/post-checkout 2>/dev/null && echo deep-hooks-written || echo deep-hooks-refused`,
        'git -C lib/deep config core.hooksPath /tmp 2>/dev/null && echo deep-config-sandboxed || echo deep-config-refused',
        'git -C lib commit -q --allow-empty -m "in the sandbox" && echo lib-committed',
        'git -C lib branch -q spare && git -C lib pack-refs --all && git -C lib gc -q --prune=now && echo lib-gc-ok',
        // The lab image has no git-submodule script; status inside the nested one is what matters.
        'git -C lib/deep status --porcelain && echo deep-status-ok',
      ].join('; '),
    );
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual(['lib-hooks-refused', 'lib-config-sandboxed', 'deep-hooks-refused', 'deep-config-sandboxed', 'lib-committed', 'lib-gc-ok', 'deep-status-ok']);
    expect((await hostGit(path.join(superproject, 'lib'), 'log', '-1', '--format=%s')).stdout).toBe('in the sandbox');
    expect([...(await refs(path.join(superproject, 'lib'))).keys()]).toEqual(expect.arrayContaining(['refs/heads/main', 'refs/heads/spare']));
    // A non-root container user on a repository another uid owns: safe.directory covers the submodules too.
    const other = await run(superproject, 'git -C lib/deep status --porcelain && git -C lib log -1 --format=%s', [], ['--network', 'none', '--user', '2000']);
    expect({ stderr: other.stderr, stdout: other.stdout }).toEqual({ stderr: '', stdout: 'in the sandbox' });
    expect((await hostGit(path.join(superproject, 'lib'), 'config', '--local', 'core.hooksPath')).stdout).toBe('');
    expect((await hostGit(path.join(superproject, 'lib', 'deep'), 'config', '--local', 'core.hooksPath')).stdout).toBe('');
    expect((await hostGit(path.join(superproject, 'lib'), 'fsck', '--no-progress')).exitCode).toBe(0);
  });

  it('--user 1000: git status in a repository owned by another uid works through safe.directory', async () => {
    const dir = await plainRepo('foreign', '2000:2000');
    const result = await run(dir, 'git status --porcelain && echo status-ok', [], ['--network', 'none', '--user', '1000']);
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe('status-ok');
  });

  it("a git that fails (macOS's xcode-select shim, faked here) falls back to the plain files with a warning; in a repository the session is refused (nothing could bring its commits home)", async () => {
    const bin = path.join(sandbox.dir, 'shim-bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(path.join(bin, 'git'), '#!/bin/sh\necho "xcrun: error: invalid active developer path (/Library/Developer/CommandLineTools)" >&2\nexit 1\n', { mode: 0o755 });
    const plan = (cwd: string) =>
      execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], { cwd, env: { ...env, PATH: `${bin}:${process.env.PATH ?? ''}` }, extendEnv: false, reject: false });
    const outside = path.join(sandbox.dir, 'no-repo');
    mkdirSync(outside, { recursive: true });
    const body = JSON.parse((await plan(outside)).stdout) as { plan: { warnings: string[]; mounts: { target: string; readOnly: boolean }[]; env: Record<string, string> } };
    expect(body.plan.warnings).toContain(
      `the session's git (${bin}/git) failed: xcrun: error: invalid active developer path (/Library/Developer/CommandLineTools); mounted ~/.gitconfig, ~/.config/git/config, ~/.gitignore_global where present, with no sandbox overrides`,
    );
    expect(body.plan.mounts.map((m) => m.target)).toContain(path.join(sandbox.home, '.gitconfig'));
    expect(body.plan.env.GIT_CONFIG_GLOBAL).toBeUndefined();
    // In a repository: its layout is read without git, but its submodules and the sandbox's commits need one.
    const dir = await plainRepo('shimmed', '1000:1000');
    const refused = await plan(dir);
    expect(refused.exitCode).not.toBe(0);
    expect(JSON.parse(refused.stdout)).toMatchObject({ error: { code: 'REPOSITORY_UNSUPPORTED', message: expect.stringContaining("no git answers on the session's PATH") as string, remedy: expect.stringContaining('xcode-select --install') as string } });
  });

  it('--user 1000: git clone ssh:// from the lab sshd through the forwarded agent, host keys from known_hosts', async () => {
    const origin = await plainRepo('ssh-origin', '0:0');
    const url = `ssh://root@127.0.0.1:${String(sshd.port)}${origin}`;
    const result = await run(src, `cd /tmp && git clone -q ${url} clone && git -C clone log -1 --format=%s && test ! -e ${sandbox.home}/.ssh/config && test ! -e ~/.ssh/config && echo no-ssh-config`, [], [
      '--network',
      'host',
      '--user',
      '1000',
    ]);
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual(['init', 'no-ssh-config']);
  });
});
