import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, daemonPid, makeSandbox, waitFor, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

/**
 * The repository boundary under attack (layouts, redirections, hooks and the mirror cases): hostile code
 * runs inside a real podman container with the plan `sandboxd run` makes, writes under its mounts,
 * and then the host runs ordinary git commands. Every payload would create a marker file on the
 * host, in a directory no container can see; a test passes when no marker exists and the
 * repository is whole (`git fsck`).
 */
const cleanup = new Cleanup();
afterAll(() => cleanup.run());

const SETUP_IDENTITY = ['-c', 'user.name=Setup', '-c', 'user.email=setup@example.com', '-c', 'commit.gpgsign=false'];
/** How long the guard may take to act once a plant exists; a bound on a condition, never a sleep. */
const GUARD_BOUND_MS = 20_000;

describe.skipIf(labMissing)('the repository boundary: attacks from inside a real container, then the host runs git', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let src: string;
  let markers: string;
  let logFile: string;

  beforeAll(() => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    chmodSync(sandbox.dir, 0o755);
    src = path.join(sandbox.dir, 'src');
    markers = path.join(sandbox.dir, 'markers');
    mkdirSync(src, { recursive: true });
    mkdirSync(markers, { recursive: true });
    env = cliEnv(sandbox, lab.env);
    logFile = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
  });

  /** The host's git as the user would run it next (trusting the test's repositories' owners). */
  function hostGit(cwd: string, ...args: string[]) {
    return execa('git', ['-c', 'safe.directory=*', ...SETUP_IDENTITY, ...args], {
      cwd,
      env: { HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' },
      reject: false,
    });
  }

  function run(cwd: string, script: string, runArgs: string[] = []): ResultPromise<{ cwd: string; env: NodeJS.ProcessEnv; extendEnv: false; reject: false; timeout: number }> {
    return execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', '--network', 'none', ...runArgs, image, 'sh', '-c', script], {
      cwd,
      env,
      extendEnv: false,
      reject: false,
      timeout: 120_000,
    });
  }

  async function planOf(cwd: string, extra: string[] = []) {
    const result = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--ssh-agent', 'off', '--json', ...extra], { cwd, env, extendEnv: false, reject: false });
    type PlanBody = { plan: { warnings: string[]; mounts: { source: string; target: string; readOnly: boolean }[] } };
    return { exitCode: result.exitCode, output: `${result.stdout}\n${result.stderr}`, body: result.exitCode === 0 ? (JSON.parse(result.stdout) as PlanBody) : null };
  }

  const marker = (name: string): string => path.join(markers, name);
  const payload = (name: string): string => `touch ${marker(name)}`;

  async function plainRepo(name: string, owner = '0:0'): Promise<string> {
    const dir = path.join(src, name);
    mkdirSync(dir, { recursive: true });
    await hostGit(dir, 'init', '-q', '-b', 'main');
    writeFileSync(path.join(dir, 'file.txt'), 'hello\n');
    await hostGit(dir, 'add', '.');
    await hostGit(dir, 'commit', '-q', '-m', 'init');
    const remote = path.join(src, `${name}-remote.git`);
    await hostGit(src, 'clone', '-q', '--bare', dir, remote);
    await hostGit(dir, 'remote', 'add', 'origin', remote);
    await execa('chown', ['-R', owner, dir]);
    return dir;
  }

  /** The guard moved `file` aside (`<file>.sandboxd-quarantine-<time>`): its new path. */
  function quarantined(file: string): string | null {
    if (!existsSync(path.dirname(file))) return null;
    const name = readdirSync(path.dirname(file)).find((entry) => entry.startsWith(`${path.basename(file)}.sandboxd-quarantine-`));
    return name === undefined ? null : path.join(path.dirname(file), name);
  }

  const waitQuarantined = (file: string) => waitFor(() => quarantined(file), `the guard to move ${file} aside`, GUARD_BOUND_MS);

  function guardLines(): { path: string; sessionIds: string[]; why: string }[] {
    if (!existsSync(logFile)) return [];
    return readFileSync(logFile, 'utf8')
      .split('\n')
      .filter((line) => line.includes('"module":"guard"') && line.includes('"level":50'))
      .map((line) => JSON.parse(line) as { path: string; sessionIds: string[]; why: string });
  }

  /** Ordinary git on the host after an attack: nothing planted ran, and the repository is whole. */
  async function hostUses(dir: string, name: string): Promise<void> {
    writeFileSync(path.join(dir, 'file.txt'), `changed for ${name}\n`);
    const steps = [
      await hostGit(dir, 'status', '--porcelain'),
      await hostGit(dir, 'commit', '-q', '-am', `host commit after ${name}`),
      await hostGit(dir, 'fetch', '-q', 'origin'),
      await hostGit(dir, 'gc', '-q'),
    ];
    const fsck = await hostGit(dir, 'fsck', '--no-progress');
    expect({ name, marker: existsSync(marker(name)), fsck: fsck.exitCode, fsckOut: fsck.stderr }).toEqual({ name, marker: false, fsck: 0, fsckOut: '' });
    expect(steps.map((step) => step.exitCode)).toEqual([0, 0, 0, 0]);
  }

  it('item 1, plain clone as root: a planted commondir never redirects the host, and .git cannot be replaced', async () => {
    const dir = await plainRepo('commondir');
    const evil = path.join(dir, 'evil');
    const result = await run(dir, [
      'mv .git .git-old 2>/dev/null && echo replaced || echo replace-refused',
      `mkdir -p ${evil}/hooks && cp -r .git/objects .git/refs .git/HEAD ${evil}/`,
      `printf '[core]\\n\\tfsmonitor = ${payload('commondir')}\\n[alias]\\n\\tst = !${payload('commondir')}\\n' > ${evil}/config`,
      `printf '#!/bin/sh\\n${payload('commondir')}\\n' > ${evil}/hooks/pre-commit && chmod +x ${evil}/hooks/pre-commit`,
      `echo ${evil} > .git/commondir && echo planted`,
    ].join('; '));
    expect(result.stdout.split('\n')).toEqual(['replace-refused', 'planted']);
    const moved = await waitQuarantined(path.join(dir, '.git', 'commondir'));
    expect(readFileSync(moved, 'utf8').trim()).toBe(evil);
    await hostUses(dir, 'commondir');
    expect(guardLines()).toContainEqual(expect.objectContaining({ path: path.join(dir, '.git', 'commondir') }));
    // The next plan for the repository says what was found.
    const next = await planOf(dir);
    expect(next.body?.plan.warnings.some((warning) => warning.startsWith(`guard: ${path.join(dir, '.git', 'commondir')} redirects`))).toBe(true);
  });

  it("item 1, linked worktree as --user 1000: the admin dir and common dir cannot be redirected; a new admin dir's foreign commondir is moved aside and restored", async () => {
    const main = await plainRepo('lw-main', '0:0');
    const wt = path.join(src, 'lw-wt');
    await hostGit(main, 'worktree', 'add', '-q', '-b', 'feature', wt);
    await execa('chown', ['-R', '1000:1000', main, wt]);
    const common = path.join(main, '.git');
    const evil = path.join(wt, 'evil');
    const inner = path.join(wt, 'inner');
    const result = await run(
      wt,
      [
        `echo ${evil} > ${common}/worktrees/lw-wt/commondir 2>/dev/null && echo own-written || echo own-refused`,
        `mv ${common}/worktrees/lw-wt ${common}/worktrees/moved 2>/dev/null && echo admin-moved || echo admin-refused`,
        `mv ${common}/worktrees ${common}/wts 2>/dev/null && echo worktrees-moved || echo worktrees-refused`,
        `mkdir -p ${evil}/hooks ${inner} ${common}/worktrees/evil && cp -r ${common}/objects ${common}/refs ${common}/HEAD ${evil}/`,
        `printf '[core]\\n\\tfsmonitor = ${payload('worktree')}\\n' > ${evil}/config`,
        `echo 'ref: refs/heads/main' > ${common}/worktrees/evil/HEAD && echo ${inner}/.git > ${common}/worktrees/evil/gitdir`,
        `echo 'gitdir: ${common}/worktrees/evil' > ${inner}/.git && echo ${evil} > ${common}/worktrees/evil/commondir && echo planted`,
      ].join('; '),
      ['--user', '1000'],
    );
    expect(result.stdout.split('\n')).toEqual(['own-refused', 'admin-refused', 'worktrees-refused', 'planted']);
    const commondir = path.join(common, 'worktrees', 'evil', 'commondir');
    await waitQuarantined(commondir);
    // Written back after the move: a worktree whose commondir is right again.
    await waitFor(() => existsSync(commondir), 'the right commondir written back', GUARD_BOUND_MS);
    expect(readFileSync(commondir, 'utf8')).toBe('../..\n');
    await hostGit(inner, 'status', '--porcelain');
    await hostUses(wt, 'worktree');
    const fsck = await hostGit(main, 'fsck', '--no-progress');
    expect(fsck.exitCode).toBe(0);
  });

  it('item 1, while the container still runs: a nested repository staged as a gitlink is disarmed before the host runs git status, and the session ends', async () => {
    const dir = await plainRepo('gitlink');
    const ready = path.join(dir, 'ready');
    const running = run(dir, [
      // The gitlink first, the repository it names afterwards: the guard must notice both.
      'git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sub',
      'mkdir sub && cd sub && git init -q && git -c user.name=x -c user.email=y commit -q --allow-empty -m s',
      `printf '[core]\\n\\tfsmonitor = ${payload('gitlink')}\\n' >> .git/config`,
      `touch ${ready}`,
      'sleep 100',
    ].join('; '));
    const config = path.join(dir, 'sub', '.git', 'config');
    const moved = await waitQuarantined(config);
    // The host's git as soon as the guard acted, the container still up.
    const status = await hostGit(dir, 'status', '--porcelain');
    expect({ code: status.exitCode, marker: existsSync(marker('gitlink')) }).toEqual({ code: 0, marker: false });
    // The window between the plant and its quarantine (documented in docs/security.md).
    const windowMs = statSync(moved).ctimeMs - statSync(moved).mtimeMs;
    console.info(`guard window (plant → moved aside): ${windowMs.toFixed(1)} ms`);
    const finished = await running;
    expect(finished.exitCode).not.toBe(0);
    expect(existsSync(ready)).toBe(true);
    const line = guardLines().find((entry) => entry.path === config);
    expect(line?.sessionIds).toHaveLength(1);
    expect(line?.why).toContain('core.fsmonitor');
    await hostGit(dir, 'rm', '-q', '--cached', 'sub');
    await hostUses(dir, 'gitlink');
  });

  it('item 2: a corrupt HEAD never drops the protection of the next session (git cannot describe the repository)', async () => {
    const dir = await plainRepo('corrupt-head');
    const first = await run(dir, 'echo garbage > .git/HEAD && echo corrupted');
    expect(first.stdout).toBe('corrupted');
    const second = await run(dir, [
      `printf '#!/bin/sh\\n${payload('corrupt-head')}\\n' > .git/hooks/pre-commit 2>/dev/null && chmod +x .git/hooks/pre-commit && echo hook-written || echo hook-refused`,
      `printf '[core]\\n\\tfsmonitor = ${payload('corrupt-head')}\\n' >> .git/config 2>/dev/null && echo config-written || echo config-refused`,
      "echo 'ref: refs/heads/main' > .git/HEAD",
    ].join('; '));
    expect(second.stdout.split('\n')).toEqual(['hook-refused', 'config-refused']);
    await hostUses(dir, 'corrupt-head');
  });

  it('item 2: an include that the sandbox turns into a FIFO is moved aside; the next plan is protected and does not hang', async () => {
    const dir = await plainRepo('fifo-include');
    await hostGit(dir, 'config', 'include.path', '../team.gitconfig');
    const result = await run(dir, 'mkfifo team.gitconfig && echo planted');
    expect(result.stdout).toBe('planted');
    await waitQuarantined(path.join(dir, 'team.gitconfig'));
    const next = await planOf(dir);
    expect(next.exitCode).toBe(0);
    const readOnly = next.body?.plan.mounts.filter((mount) => mount.readOnly).map((mount) => mount.target);
    expect(readOnly).toEqual(expect.arrayContaining([path.join(dir, '.git', 'hooks'), path.join(dir, '.git', 'config')]));
  });

  it("item 3: a worktree admin dir naming a private key, or a config.worktree linked to it, is never mounted", async () => {
    const key = path.join(sandbox.home, '.ssh', 'id_ed25519');
    mkdirSync(path.dirname(key), { recursive: true });
    writeFileSync(key, 'SECRET-KEY-MATERIAL\n', { mode: 0o600 });
    const dir = await plainRepo('key-leak');
    const first = await run(dir, [
      'mkdir -p .git/worktrees/x',
      "echo ../.. > .git/worktrees/x/commondir && echo 'ref: refs/heads/main' > .git/worktrees/x/HEAD",
      `echo ${key} > .git/worktrees/x/gitdir`,
      `ln -s ${key} .git/worktrees/x/config.worktree && ln -s ${key} .git/config.worktree && echo planted`,
    ].join('; '));
    expect(first.stdout).toBe('planted');
    const second = await run(dir, `cat ${key} 2>/dev/null || echo unreadable`);
    expect(second.stdout).toBe('unreadable');
    const plan = await planOf(dir);
    expect(plan.body?.plan.mounts.filter((mount) => mount.source === key || mount.target === key)).toEqual([]);
    expect(lstatSync(path.join(dir, '.git', 'config.worktree'), { throwIfNoEntry: false })).toBeUndefined();
  });

  it('item 4: a worktree admin dir without gitdir does not break later runs', async () => {
    const dir = await plainRepo('no-gitdir');
    const first = await run(dir, "mkdir -p .git/worktrees/y && echo 'ref: refs/heads/main' > .git/worktrees/y/HEAD && echo made");
    expect(first.stdout).toBe('made');
    const second = await run(dir, 'git status --porcelain && echo status-ok');
    expect({ code: second.exitCode, stdout: second.stdout, stderr: second.stderr }).toEqual({ code: 0, stdout: 'status-ok', stderr: '' });
  });

  /** A superproject with one submodule from a local remote, registered (`git submodule init`) but not cloned. */
  async function superproject(name: string, owner = '0:0'): Promise<{ dir: string; lib: string }> {
    const lib = await plainRepo(`${name}-lib`);
    const dir = await plainRepo(name);
    await hostGit(dir, '-c', 'protocol.file.allow=always', 'submodule', 'add', '-q', lib, 'lib');
    await hostGit(dir, 'commit', '-q', '-m', 'add lib');
    // As a fresh clone has it: registered in .git/config, its git dir not there yet.
    await hostGit(dir, 'submodule', 'deinit', '-q', '-f', 'lib');
    await execa('rm', ['-rf', path.join(dir, '.git', 'modules')]);
    await hostGit(dir, 'submodule', 'init', '-q');
    await execa('chown', ['-R', owner, dir]);
    return { dir, lib };
  }

  /** How many checks of `dir` that included its work trees the daemon logged (one ends each session). */
  const checksOf = (dir: string) => (existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').filter((line) => line.includes('repository checked, work trees included') && line.includes(dir)).length : 0);

  const settled = (dir: string, checksBefore: number) => waitFor(() => checksOf(dir) > checksBefore, 'the check at the end of the session', GUARD_BOUND_MS);

  it('git works normally inside with the guard on (commit, branch, worktree add, submodule update --init from a local remote, commit in it, gc, a nested scratch repository): no finding, nothing ended', async () => {
    const { dir, lib } = await superproject('normal');
    const before = checksOf(dir);
    const findingsBefore = guardLines().length;
    const result = await run(
      dir,
      [
        'git -c user.name=x -c user.email=y commit -q --allow-empty -m inside',
        'git branch side',
        'git worktree add -q .worktrees/x -b x && git -C .worktrees/x -c user.name=x -c user.email=y commit -q --allow-empty -m in-worktree',
        'git -c protocol.file.allow=always submodule update -q --init',
        'git -C lib -c user.name=x -c user.email=y commit -q --allow-empty -m in-submodule',
        'git gc -q && git -C lib gc -q',
        'git init -q scratch && git -C scratch -c user.name=x -c user.email=y commit -q --allow-empty -m scratch',
        'echo done',
      ].join(' && '),
      ['--mount', `type=bind,src=${lib},dst=${lib},ro`],
    );
    expect({ code: result.exitCode, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 0, stdout: 'done', stderr: '' });
    await settled(dir, before);
    expect(guardLines().slice(findingsBefore)).toEqual([]);
    expect((await hostGit(path.join(dir, 'lib'), 'log', '-1', '--format=%s')).stdout).toBe('in-submodule');
    expect((await hostGit(path.join(dir, '.worktrees', 'x'), 'log', '-1', '--format=%s')).stdout).toBe('in-worktree');
    expect((await hostGit(dir, 'fsck', '--no-progress')).exitCode).toBe(0);
  });

  it('submodules as --user 1000: existing hooks and config stay read-only; a new git dir under modules/ with a config that runs programs or symlinked hooks is moved aside', async () => {
    const { dir } = await superproject('subattack');
    await hostGit(dir, '-c', 'protocol.file.allow=always', 'submodule', 'update', '-q', '--init');
    await execa('chown', ['-R', '1000:1000', dir]);
    const modules = path.join(dir, '.git', 'modules');
    const result = await run(
      dir,
      [
        `touch ${modules}/lib/hooks/post-checkout 2>/dev/null && echo hooks-written || echo hooks-refused`,
        `echo x >> ${modules}/lib/config 2>/dev/null && echo config-written || echo config-refused`,
        `mkdir -p ${modules}/evil ${modules}/hooked evil hooked evilhooks && cp -r ${modules}/lib/objects ${modules}/lib/refs ${modules}/lib/HEAD ${modules}/evil/`,
        `cp -r ${modules}/lib/objects ${modules}/lib/refs ${modules}/lib/HEAD ${modules}/hooked/`,
        `printf '[core]\\n\\tworktree = ../../../evil\\n\\tfsmonitor = ${payload('submodule')}\\n' > ${modules}/evil/config`,
        `printf '[core]\\n\\tworktree = ../../../hooked\\n' > ${modules}/hooked/config`,
        `printf '#!/bin/sh\\n${payload('submodule')}\\n' > evilhooks/post-commit && chmod +x evilhooks/post-commit && ln -s ${dir}/evilhooks ${modules}/hooked/hooks`,
        `echo 'gitdir: ../.git/modules/evil' > evil/.git && echo 'gitdir: ../.git/modules/hooked' > hooked/.git`,
        'git update-index --add --cacheinfo 160000,$(git -C lib rev-parse HEAD),evil --cacheinfo 160000,$(git -C lib rev-parse HEAD),hooked && echo planted',
      ].join('; '),
      ['--user', '1000'],
    );
    expect(result.stdout.split('\n')).toEqual(['hooks-refused', 'config-refused', 'planted']);
    await waitQuarantined(path.join(modules, 'evil', 'config'));
    await waitQuarantined(path.join(modules, 'hooked', 'hooks'));
    await hostGit(dir, 'status', '--porcelain');
    await hostGit(path.join(dir, 'hooked'), 'commit', '-q', '--allow-empty', '-m', 'host commit in the planted submodule');
    expect(existsSync(marker('submodule'))).toBe(false);
    await hostGit(dir, 'rm', '-q', '--cached', 'evil', 'hooked');
    await hostUses(dir, 'submodule');
  });

  it('symlinked hooks: replacing hooks/ is refused inside; a repository whose hooks/ is a symbolic link gets no plan unless --git-hooks writable', async () => {
    const dir = await plainRepo('symlinked-hooks');
    const result = await run(dir, 'rm -rf .git/hooks 2>/dev/null; ln -s ../evil .git/hooks 2>/dev/null && echo replaced || echo refused');
    expect(result.stdout).toBe('refused');
    await execa('rm', ['-rf', path.join(dir, '.git', 'hooks')]);
    mkdirSync(path.join(dir, 'shared-hooks'));
    await execa('ln', ['-s', '../shared-hooks', path.join(dir, '.git', 'hooks')]);
    const refused = await planOf(dir);
    expect(refused.exitCode).not.toBe(0);
    expect(refused.output).toContain('REPOSITORY_UNSAFE');
    expect(refused.output).toContain(`${path.join(dir, '.git', 'hooks')} is a symbolic link`);
    expect(refused.output).toContain('--git-hooks writable');
    const allowed = await planOf(dir, ['--git-hooks', 'writable']);
    expect(allowed.exitCode).toBe(0);
  });

  it("alternates and symlinked packs planted in the git dir are moved aside before the host's git reads another repository's objects through them", async () => {
    const secret = await plainRepo('secret-repo');
    writeFileSync(path.join(secret, 'secret.txt'), 'the other repository\n');
    await hostGit(secret, 'add', '.');
    await hostGit(secret, 'commit', '-q', '-m', 'secret');
    await hostGit(secret, 'repack', '-q', '-a', '-d');
    const blob = (await hostGit(secret, 'rev-parse', 'HEAD:secret.txt')).stdout;
    const pack = readdirSync(path.join(secret, '.git', 'objects', 'pack')).find((name) => name.endsWith('.pack')) ?? '';
    const dir = await plainRepo('alternates');
    const secretPacks = path.join(secret, '.git', 'objects', 'pack');
    const result = await run(dir, [
      `echo ${path.join(secret, '.git', 'objects')} > .git/objects/info/alternates`,
      `ln -s ${secretPacks}/${pack} .git/objects/pack/${pack} && ln -s ${secretPacks}/${pack.replace(/\.pack$/, '.idx')} .git/objects/pack/${pack.replace(/\.pack$/, '.idx')} && echo planted`,
    ].join('; '));
    expect(result.stdout).toBe('planted');
    await waitQuarantined(path.join(dir, '.git', 'objects', 'info', 'alternates'));
    await waitQuarantined(path.join(dir, '.git', 'objects', 'pack', pack));
    await waitQuarantined(path.join(dir, '.git', 'objects', 'pack', pack.replace(/\.pack$/, '.idx')));
    expect((await hostGit(dir, 'cat-file', '-e', blob)).exitCode).not.toBe(0);
    await hostUses(dir, 'alternates');
    expect((await hostGit(dir, 'cat-file', '-e', blob)).exitCode).not.toBe(0);
  });

  it('info/attributes and .gitattributes can only pick filters the host defines: a filter the sandbox tries to define never runs', async () => {
    const dir = await plainRepo('attributes');
    const result = await run(dir, [
      "printf '* filter=evil diff=evil\\n' > .git/info/attributes && printf '* filter=evil\\n' > .gitattributes",
      `git config filter.evil.clean '${payload('attributes')}' 2>/dev/null && echo defined || echo refused`,
      `git config diff.evil.textconv '${payload('attributes')}' 2>/dev/null && echo defined || echo refused`,
    ].join('; '));
    expect(result.stdout.split('\n')).toEqual(['refused', 'refused']);
    await hostGit(dir, 'add', '-A');
    await hostGit(dir, 'diff', '--cached');
    await hostUses(dir, 'attributes');
  });

  it('a plant made while the daemon is down is moved aside by the next daemon before its sessions come back', async () => {
    const dir = await plainRepo('restart');
    const ready = path.join(dir, 'ready');
    const go = path.join(dir, 'go');
    const planted = path.join(dir, 'planted');
    const running = run(dir, [
      `touch ${ready}`,
      `while [ ! -e ${go} ]; do sleep 0.1; done`,
      `echo ${dir}/elsewhere > .git/commondir && touch ${planted}`,
      'sleep 100',
    ].join('; '));
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(ready), 'the container to start', 60_000);
    const pid = daemonPid(sandbox.env);
    if (pid === null) throw new Error('no daemon answers for the held session');
    // The client is held still, so only the next daemon's start-up check can find the plant.
    const client = running.pid ?? 0;
    process.kill(client, 'SIGSTOP');
    cleanup.add(() => {
      process.kill(client, 'SIGCONT');
    });
    process.kill(pid, 'SIGKILL');
    writeFileSync(go, '');
    await waitFor(() => existsSync(planted), 'the plant while no daemon runs', GUARD_BOUND_MS);
    expect(quarantined(path.join(dir, '.git', 'commondir'))).toBeNull();
    const started = await execa(process.execPath, [CLI, 'start'], { env, extendEnv: false, reject: false });
    expect(started.exitCode).toBe(0);
    await waitQuarantined(path.join(dir, '.git', 'commondir'));
    process.kill(client, 'SIGCONT');
    running.kill('SIGTERM');
    await running;
    await hostUses(dir, 'restart');
  });
});
