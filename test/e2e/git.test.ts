import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, startDaemon, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

const USER = ['--container-user', '1000:1000', '--container-home', '/home/u'];

async function git(cwd: string, ...args: string[]) {
  return execa('git', args, { cwd, env: { HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' } });
}

describe.skipIf(labMissing)('git inside the sandbox (real repositories, real containers as --user 1000)', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let src: string;
  /** Not the sandbox dir itself: it holds the test's HOME, which is refused as a workdir. */
  let work: string;

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    const home = sandbox.home;
    mkdirSync(path.join(home, 'inc'), { recursive: true });
    mkdirSync(path.join(home, '.aws'), { recursive: true });
    // Only the nested include sets user.email; the container must follow the includes.
    writeFileSync(
      path.join(home, '.gitconfig'),
      '[user]\n\tname = Host User\n[include]\n\tpath = inc/identity.inc\n[core]\n\texcludesFile = ~/.gitignore_global\n[credential]\n\thelper = store\n[safe]\n\tdirectory = *\n[init]\n\tdefaultBranch = main\n',
    );
    writeFileSync(path.join(home, 'inc', 'identity.inc'), '[include]\n\tpath = deeper.inc\n');
    writeFileSync(path.join(home, 'inc', 'deeper.inc'), '[user]\n\temail = included@example.com\n');
    writeFileSync(path.join(home, '.gitignore_global'), '*.secret\n');
    writeFileSync(path.join(home, '.git-credentials'), 'https://user:token@example.com\n');
    writeFileSync(path.join(home, '.aws', 'credentials'), '[default]\naws_access_key_id = TEST\n');

    work = path.join(sandbox.dir, 'work');
    mkdirSync(work, { recursive: true });
    src = path.join(sandbox.dir, 'src');
    for (const repo of ['plain', 'main']) {
      const dir = path.join(src, repo);
      mkdirSync(path.join(dir, 'sub'), { recursive: true });
      await git(dir, 'init', '-q', '-b', 'main');
      writeFileSync(path.join(dir, 'sub', 'file.txt'), 'hello\n');
      await git(dir, 'add', '.');
      await git(dir, '-c', 'user.name=Setup', '-c', 'user.email=setup@example.com', 'commit', '-q', '-m', 'init');
    }
    await git(path.join(src, 'main'), 'worktree', 'add', '-q', '-b', 'feature', path.join(src, 'wt'));
    // The container runs as uid 1000, the owner of the repositories (as a rootless user would be).
    await execa('chown', ['-R', '1000:1000', src]);
    env = cliEnv(sandbox, lab.env);
    await startDaemon(env, cleanup);
  });

  function run(cwd: string, script: string, extra: string[] = []) {
    return execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', ...USER, ...extra, '--', '--rm', '--network', 'none', '--user', '1000:1000', image, 'sh', '-c', script], {
      cwd,
      env: { ...env, TERM: 'xterm-test', SECRET_TOKEN: 'do-not-leak' },
      extendEnv: false,
      reject: false,
      timeout: 60_000,
    });
  }

  it('plain clone: status from a subdirectory, the included identity, excludes, no credentials, hooks read-only', async () => {
    const cwd = path.join(src, 'plain', 'sub');
    const result = await run(
      cwd,
      [
        'touch ignored.secret new.txt',
        'git status --porcelain',
        'echo "email=$(git config user.email) name=$(git config user.name) pwd=$(pwd)"',
        `test -e ~/.git-credentials || test -e ${sandbox.home}/.git-credentials && echo creds-present || echo creds-absent`,
        'touch ../.git/hooks/pre-commit 2>/dev/null && echo hook-written || echo hook-refused',
        'echo "term=$TERM secret=${SECRET_TOKEN:-unset}"',
      ].join('; '),
    );
    expect(result.stderr).toBe('');
    const lines = result.stdout.split('\n');
    expect(lines).toContain('?? sub/new.txt');
    expect(result.stdout).not.toContain('ignored.secret');
    expect(lines).toContain(`email=included@example.com name=Host User pwd=${cwd}`);
    expect(lines).toContain('creds-absent');
    expect(lines).toContain('hook-refused');
    expect(lines).toContain('term=xterm-test secret=unset');
  });

  it('mounts a newly added include while the daemon runs (cached git facts are invalidated)', async () => {
    const identity = path.join(sandbox.home, 'inc', 'identity.inc');
    const original = readFileSync(identity, 'utf8');
    writeFileSync(path.join(sandbox.home, 'inc', 'extra.inc'), '[user]\n\tsigningkey = ABC123\n');
    const before = await run(work, 'git config user.signingkey || echo none');
    expect(before.stdout).toBe('none');
    writeFileSync(identity, `${original}[include]\n\tpath = extra.inc\n`);
    const after = await run(work, 'git config user.signingkey || echo none');
    writeFileSync(identity, original);
    expect(after.stdout).toBe('ABC123');
  });

  it('linked worktree: git commit succeeds with the host identity; hooks and config stay read-only', async () => {
    const cwd = path.join(src, 'wt');
    const result = await run(
      cwd,
      [
        'echo change >> sub/file.txt',
        'git add sub/file.txt',
        'git commit -q -m "from the sandbox" && echo committed',
        `touch ${src}/main/.git/hooks/post-commit 2>/dev/null && echo hook-written || echo hook-refused`,
        'git config --local sandbox.planted yes 2>/dev/null && echo config-written || echo config-refused',
      ].join('; '),
    );
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual(['committed', 'hook-refused', 'config-refused']);
    const log = await git(cwd, '-c', 'safe.directory=*', 'log', '-1', '--format=%an <%ae> %s');
    expect(log.stdout).toBe('Host User <included@example.com> from the sandbox');
    const branch = await git(path.join(src, 'main'), '-c', 'safe.directory=*', 'log', '-1', '--format=%s', 'feature');
    expect(branch.stdout).toBe('from the sandbox');
  });

  it('--git-hooks writable lets the sandbox write hooks (the documented policy switch)', async () => {
    const result = await run(path.join(src, 'plain'), 'touch .git/hooks/planted && echo hook-written', ['--git-hooks', 'writable']);
    expect(result.stdout).toBe('hook-written');
  });

  it('extra mounts are read-only by default; bad ones are rejected naming the entry', async () => {
    const data = path.join(sandbox.dir, 'data');
    mkdirSync(data, { recursive: true });
    writeFileSync(path.join(data, 'in.txt'), 'data\n');
    const ok = await run(work, 'cat /data/in.txt; touch /data/x 2>/dev/null && echo writable || echo read-only', ['--mount', `${data}:/data`]);
    expect(ok.stdout).toBe('data\nread-only');
    const bad = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--json', '--mount', `${data}/../data:/x`], { env, reject: false });
    expect(bad.exitCode).toBe(1);
    expect(JSON.parse(bad.stdout)).toMatchObject({ error: { code: 'INVALID_MOUNT', message: `mount "${data}/../data:/x" contains ".." ("${data}/../data")` } });
    const missing = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--mount', '/does/not/exist'], { env, reject: false });
    expect(missing.stderr).toContain('sandboxd: mount "/does/not/exist" names /does/not/exist, which does not exist');
  });

  it('cloud credentials only on request, read-only, in both homes', async () => {
    const script = 'cat ~/.aws/credentials 2>/dev/null | head -1 || true; echo x >> ~/.aws/credentials 2>/dev/null && echo writable || echo not-writable';
    const without = await run(work, script);
    expect(without.stdout).not.toContain('[default]');
    const withCreds = await run(work, script, ['--cloud-credentials']);
    expect(withCreds.stdout).toBe('[default]\nnot-writable');
  });

  it('--no-workdir leaves the working directory to the image', async () => {
    const file = path.join(src, 'plain', 'sub', 'file.txt');
    const result = await run(path.join(src, 'plain'), `pwd; test -e ${file} && echo mounted || echo not-mounted`, ['--no-workdir']);
    expect(result.stdout).toBe('/\nnot-mounted');
  });
});
