import { appendFileSync, chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, daemonPid, makeSandbox, startAgent, waitFor, type Agent, type Sandbox } from '../helpers.js';
import { createTestUser, labImageTar } from '../lab/test-user.js';
import { fsckStrict, hostGit, plainRepo, refsOf, runIn, waitForFile } from './git-lab.js';
import { lab, labMissing, podmanLab } from './lab.js';

/**
 * Git's ordinary flows inside a real container, in the sandbox's own git dir, and what the host
 * sees of them: each comes home while the session runs or when it ends, the host's HEAD follows
 * the sandbox's branch, `git status` on the host is clean, and `git fsck --strict` finds the host's
 * repository whole. As root and as `--user 1000`.
 */
const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** A bound on a condition (a sync is debounced and runs a few gits), never a sleep. */
const SYNC_BOUND_MS = 20_000;

describe.skipIf(labMissing)("the sandbox's git work comes home (real git, real containers)", () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let src: string;
  let agent: Agent;

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    chmodSync(sandbox.dir, 0o755);
    src = path.join(sandbox.dir, 'src');
    mkdirSync(src, { recursive: true });
    agent = await startAgent(sandbox.dir, cleanup);
    mkdirSync(path.join(sandbox.home, '.ssh'), { recursive: true });
    writeFileSync(path.join(sandbox.home, '.ssh', 'id_ed25519.pub'), readFileSync(`${agent.keyPath}.pub`));
    writeFileSync(path.join(sandbox.home, '.gitconfig'), '[user]\n\tname = Host User\n\temail = host@example.com\n[init]\n\tdefaultBranch = main\n');
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket });
  });

  const USERS = [
    ['root', undefined, '0:0'],
    ['--user 1000', '1000', '1000:1000'],
  ] as const;

  const head = async (dir: string) => (await hostGit(dir, 'symbolic-ref', '-q', 'HEAD')).stdout;
  const subject = async (dir: string, rev: string) => (await hostGit(dir, 'log', '-1', '--format=%s', rev)).stdout;
  const status = async (dir: string) => (await hostGit(dir, 'status', '--porcelain')).stdout;

  async function wholeAfter(dir: string): Promise<void> {
    expect(await fsckStrict(dir)).toEqual({ code: 0, out: '' });
  }

  it.each(USERS)('%s: a commit made inside reaches the host while the session runs; HEAD and index follow, status is clean', async (name, user, owner) => {
    const dir = await plainRepo(path.join(src, `commit-${owner.replace(':', '-')}`), owner);
    const go = path.join(dir, 'go');
    const running = runIn(env, image, dir, ['echo more >> file.txt', 'git commit -q -am inside', 'echo more2 >> file.txt', waitForFile(go)].join(' && '), { user });
    cleanup.add(() => running.kill('SIGKILL'));
    // The index moves with HEAD; only what the sandbox has not committed yet shows.
    await waitFor(async () => (await subject(dir, 'main')) === 'inside' && (await status(dir)) === ' M file.txt', 'the commit made inside on the host', SYNC_BOUND_MS);
    expect({ name, head: await head(dir) }).toEqual({ name, head: 'refs/heads/main' });
    writeFileSync(go, '');
    expect((await running).exitCode).toBe(0);
    await wholeAfter(dir);
  });

  it.each(USERS)("%s: a branch made and checked out inside: the host's HEAD follows it, status clean", async (_name, user, owner) => {
    const dir = await plainRepo(path.join(src, `branch-${owner.replace(':', '-')}`), owner);
    const go = path.join(dir, 'go');
    const running = runIn(env, image, dir, ['git checkout -q -b feature', 'echo f > feature.txt', 'git add feature.txt', 'git commit -q -m feature', waitForFile(go), 'rm go'].join(' && '), { user });
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(async () => (await head(dir)) === 'refs/heads/feature' && (await status(dir)) === '', "the host's HEAD on feature, status clean", SYNC_BOUND_MS);
    expect(await subject(dir, 'feature')).toBe('feature');
    writeFileSync(go, '');
    expect((await running).exitCode).toBe(0);
    expect(await status(dir)).toBe('');
    expect(await subject(dir, 'main')).toBe('init');
    await wholeAfter(dir);
  });

  it('stash, a tag and a new branch come home; nothing is deleted on the host', async () => {
    const dir = await plainRepo(path.join(src, 'stash'), '1000:1000');
    await hostGit(dir, 'branch', 'doomed');
    const result = await runIn(env, image, dir, ['echo dirty >> file.txt', 'git stash -q', 'git tag v1', 'git branch spare', 'git branch -q -D doomed'].join(' && '), { user: '1000' });
    // Deleting a branch also drops its config section, which the sandbox's read-only copy refuses (docs/git.md).
    expect({ code: result.exitCode, stderr: result.stderr.split('\n') }).toEqual({ code: 0, stderr: ['error: could not write config file .git/config: Device or resource busy', 'warning: Update of config-file failed'] });
    const refs = await refsOf(dir);
    expect([...refs.keys()].sort()).toEqual(['refs/heads/doomed', 'refs/heads/main', 'refs/heads/spare', 'refs/stash', 'refs/tags/v1']);
    expect((await hostGit(dir, 'stash', 'list')).stdout).toContain('WIP on main');
    expect(await status(dir)).toBe('');
    await wholeAfter(dir);
  });

  it("a rebase inside rewrites the host's branch when the host left it where the sandbox found it; HEAD and status follow", async () => {
    const dir = await plainRepo(path.join(src, 'rebase'), '0:0');
    await hostGit(dir, 'checkout', '-q', '-b', 'feature');
    writeFileSync(path.join(dir, 'feature.txt'), 'f\n');
    await hostGit(dir, 'add', '.');
    await hostGit(dir, 'commit', '-q', '-m', 'feature work');
    await hostGit(dir, 'checkout', '-q', 'main');
    writeFileSync(path.join(dir, 'main.txt'), 'm\n');
    await hostGit(dir, 'add', '.');
    await hostGit(dir, 'commit', '-q', '-m', 'main moves on');
    await hostGit(dir, 'checkout', '-q', 'feature');
    const before = (await refsOf(dir)).get('refs/heads/feature');
    const result = await runIn(env, image, dir, 'git -c user.name=x -c user.email=y rebase -q main');
    expect(result.exitCode).toBe(0);
    expect(result.stderr).toContain(`sandboxd: the sandbox rewrote feature (not a fast-forward): its previous tip ${before?.slice(0, 12) ?? ''} is in \`git reflog feature\``);
    expect((await hostGit(dir, 'log', '--format=%s', 'feature')).stdout.split('\n')).toEqual(['feature work', 'main moves on', 'init']);
    expect({ head: await head(dir), status: await status(dir) }).toEqual({ head: 'refs/heads/feature', status: '' });
    expect((await hostGit(dir, 'reflog', '-1', '--format=%gs', 'feature')).stdout).toBe('sandboxd: from the sandbox');
    await wholeAfter(dir);
  });

  it("worktree add inside: the new worktree's branch comes home (the worktree itself is the sandbox's)", async () => {
    const dir = await plainRepo(path.join(src, 'wtadd'), '1000:1000');
    const result = await runIn(env, image, dir, 'git worktree add -q .wt/x -b x && git -C .wt/x -c user.name=x -c user.email=y commit -q --allow-empty -m in-worktree', { user: '1000' });
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    expect(await subject(dir, 'x')).toBe('in-worktree');
    expect((await hostGit(dir, 'worktree', 'list', '--porcelain')).stdout).not.toContain('.wt/x');
    await wholeAfter(dir);
  });

  it("submodule update of an initialised submodule inside; a commit in it comes home to the submodule's git dir", async () => {
    const lib = await plainRepo(path.join(src, 'sub-lib'));
    const dir = await plainRepo(path.join(src, 'sub-super'));
    await hostGit(dir, '-c', 'protocol.file.allow=always', 'submodule', 'add', '-q', lib, 'lib');
    await hostGit(dir, 'commit', '-q', '-m', 'add lib');
    // Populated on the host (the sandbox cannot clone a submodule's git dir the host has not got).
    await execa('chown', ['-R', '1000:1000', dir]);
    const result = await runIn(
      env,
      image,
      dir,
      ['git -C lib checkout -q main', 'git -c protocol.file.allow=always submodule update -q', 'git -C lib checkout -q -b topic', 'git -C lib -c user.name=x -c user.email=y commit -q --allow-empty -m in-submodule'].join(' && '),
      { user: '1000', flags: ['--ssh-agent', 'off', '--mount', `${lib}:ro`] },
    );
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    const module = path.join(dir, 'lib');
    expect({ topic: await subject(module, 'topic'), head: await head(module), status: await status(module) }).toEqual({ topic: 'in-submodule', head: 'refs/heads/topic', status: '' });
    await wholeAfter(module);
    await wholeAfter(dir);
  });

  it('a signed commit (SSH, through the forwarded agent) comes home signed and verifies on the host', async () => {
    const dir = await plainRepo(path.join(src, 'signed'), '1000:1000');
    const config = path.join(sandbox.home, '.gitconfig');
    const plain = readFileSync(config, 'utf8');
    writeFileSync(config, `[user]\n\tname = Host User\n\temail = host@example.com\n\tsigningkey = ~/.ssh/id_ed25519.pub\n[gpg]\n\tformat = ssh\n[commit]\n\tgpgsign = true\n`);
    // The later tests commit without the agent: they get the config back even when this one fails.
    const result = await runIn(env, image, dir, 'echo signed >> file.txt && git commit -q -am signed', { user: '1000', flags: ['--ssh-agent', 'on'] }).finally(() => {
      writeFileSync(config, plain);
    });
    expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    const allowed = path.join(sandbox.dir, 'allowed_signers');
    writeFileSync(allowed, `host@example.com ${readFileSync(`${agent.keyPath}.pub`, 'utf8')}`);
    const verified = await hostGit(dir, '-c', `gpg.ssh.allowedSignersFile=${allowed}`, 'verify-commit', 'main');
    expect(verified.stderr).toContain('Good "git" signature for host@example.com');
    await wholeAfter(dir);
  });

  it("rootless Podman (a non-root user's daemon): a commit comes home, and the next session's refresh sets aside what a sub-uid of the container wrote, even what it made unreadable", async () => {
    const { image } = podmanLab();
    const user = await createTestUser(cleanup, { tar: await labImageTar(lab.dir, cleanup), name: image });
    const dir = path.join(user.home, 'repo');
    await user.run('sh', ['-c', `git init -q -b main ${dir} && git -C ${dir} -c user.name=u -c user.email=u@x commit -q --allow-empty -m init`]);
    const runAs = (script: string) => {
      const { file, args, env: userEnv } = user.command('sudo', ['run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', image, 'sh', '-c', script]);
      return execa(file, args, { env: userEnv, extendEnv: false, reject: false, timeout: 120_000, cwd: dir });
    };
    // The container's root (the user) commits; its uid 2000 (a sub-uid) leaves a directory only it can read in the sandbox's git dir.
    const first = await runAs('git -c user.name=x -c user.email=y commit -q --allow-empty -m "from a sub-uid" && echo "other:x:2000:2000::/:/bin/sh" >> /etc/passwd && su other -s /bin/sh -c "mkdir .git/mine && touch .git/mine/x && chmod 700 .git/mine" && echo done');
    expect({ code: first.exitCode, stdout: first.stdout, stderr: first.stderr }).toEqual({ code: 0, stdout: 'done', stderr: '' });
    expect((await hostGit(dir, 'log', '-1', '--format=%s', 'main')).stdout).toBe('from a sub-uid');
    const second = await runAs('test -e .git/mine && echo stale || echo fresh; git log -1 --format=%s');
    expect({ code: second.exitCode, stdout: second.stdout }).toEqual({ code: 0, stdout: 'fresh\nfrom a sub-uid' });
    // What the daemon (the user) cannot remove stays set aside, and the log says how to remove it.
    const logFile = path.join(user.home, '.local', 'state', 'sandboxd', 'log', 'sandboxd.log');
    await waitFor(() => existsSync(logFile) && readFileSync(logFile, 'utf8').includes('podman unshare rm -rf'), 'the log line naming the leftover', SYNC_BOUND_MS);
    await wholeAfter(dir);
  });

  it('a daemon killed (kill -9) while a session runs: the next one keeps its sandbox git dir, and a commit made meanwhile comes home', async () => {
    const dir = await plainRepo(path.join(src, 'killed'), '0:0');
    const [started, go, go2] = ['started', 'go', 'go2'].map((name) => path.join(dir, name));
    const running = runIn(env, image, dir, [`touch ${started ?? ''}`, waitForFile(go ?? ''), 'git -c user.name=x -c user.email=y commit -q --allow-empty -m "while no daemon ran"', waitForFile(go2 ?? ''), `rm ${[started, go, go2].join(' ')}`].join(' && '));
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(started ?? ''), 'the container to start', SYNC_BOUND_MS);
    const pid = daemonPid(sandbox.env);
    if (pid === null) throw new Error('no daemon answers for the running session');
    process.kill(pid, 'SIGKILL');
    writeFileSync(go ?? '', '');
    const restarted = await execa(process.execPath, [CLI, 'start'], { env, extendEnv: false, reject: false });
    expect(restarted.exitCode).toBe(0);
    await waitFor(async () => (await subject(dir, 'main')) === 'while no daemon ran', 'the commit made while no daemon ran, on the host', 60_000);
    writeFileSync(go2 ?? '', '');
    expect((await running).exitCode).toBe(0);
    await wholeAfter(dir);
  });

  it('host commits: the next session starts from them; a running session keeps the copy it started with', async () => {
    const dir = await plainRepo(path.join(src, 'host-side'), '0:0');
    const go = path.join(dir, 'go');
    const started = path.join(dir, 'started');
    const running = runIn(env, image, dir, [`touch ${started}`, waitForFile(go), 'git log -1 --format=%s', `rm ${started} ${go}`].join(' && '));
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(started), 'the container to start', SYNC_BOUND_MS);
    appendFileSync(path.join(dir, 'file.txt'), 'host\n');
    await hostGit(dir, 'commit', '-q', '-am', 'made on the host');
    writeFileSync(go, '');
    expect((await running).stdout).toBe('init');
    const next = await runIn(env, image, dir, 'git log -1 --format=%s && git status --porcelain');
    expect(next.stdout).toBe('made on the host');
    await wholeAfter(dir);
  });

  it("sessions one at a time: the next takes the copy made ahead, sees nothing the last container wrote in its copy, and a host commit made between is what it sees", async () => {
    const dir = await plainRepo(path.join(src, 'one-at-a-time'), '0:0');
    const gitDirs = path.join(sandbox.env.SANDBOXD_STATE_DIR, 'git-dirs');
    // Found once a session's record names the repository (a renewal removes it for a moment).
    let found: string | undefined;
    const keyDir = () => {
      found ??= readdirSync(gitDirs).find((name) => readFileSync(path.join(gitDirs, name, 'record.json'), 'utf8').includes(JSON.stringify(path.join(dir, '.git'))));
      if (found === undefined) throw new Error("no sandbox git dir for the repository");
      return path.join(gitDirs, found);
    };
    // Each session plants in its copy what never comes home, and reports what it found of the last one's.
    const look = [
      '(test -e .git/ahead && echo ahead || echo fresh)',
      '(test -e .git/planted && echo planted || echo clean)',
      '(grep -q secret .git/info/exclude && echo excluded || echo clean)',
      'git log -1 --format=%s',
      'echo x > .git/planted',
      'echo secret >> .git/info/exclude',
    ].join(' && ');
    const first = await runIn(env, image, dir, look);
    expect({ code: first.exitCode, stdout: first.stdout }).toEqual({ code: 0, stdout: 'fresh\nclean\nclean\ninit' });
    // The copy made in place once the first session ended (its host git dir settled), recorded as
    // no session's; the next acquire takes it.
    const madeAhead = () => {
      try {
        return (JSON.parse(readFileSync(path.join(keyDir(), 'record.json'), 'utf8')) as { sandboxes: { used: boolean }[] }).sandboxes[0]?.used === false;
      } catch {
        return false;
      }
    };
    // A witness of this very copy, as only the test can write it (the next one is made in place as
    // soon as a session ends: its inode says nothing once that session is over).
    await waitFor(madeAhead, 'the copy made ahead', SYNC_BOUND_MS);
    writeFileSync(path.join(keyDir(), 's', 'ahead'), '');
    const second = await runIn(env, image, dir, look);
    expect({ code: second.exitCode, stdout: second.stdout }).toEqual({ code: 0, stdout: 'ahead\nclean\nclean\ninit' });
    // A host commit after the next copy was made: that copy is not the host's any more, and goes.
    await waitFor(madeAhead, 'the copy made ahead', SYNC_BOUND_MS);
    writeFileSync(path.join(keyDir(), 's', 'ahead'), '');
    appendFileSync(path.join(dir, 'file.txt'), 'host\n');
    await hostGit(dir, 'commit', '-q', '-am', 'made on the host');
    const third = await runIn(env, image, dir, `${look} && git status --porcelain`);
    expect({ code: third.exitCode, stdout: third.stdout }).toEqual({ code: 0, stdout: 'fresh\nclean\nclean\nmade on the host' });
    await wholeAfter(dir);
  });
});
