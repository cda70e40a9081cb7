import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, waitFor, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

/**
 * The repository boundary under attack (issue 20, items 1-4 and the mirror cases): hostile code
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
    return { exitCode: result.exitCode, stderr: result.stderr, body: result.exitCode === 0 ? (JSON.parse(result.stdout) as PlanBody) : null };
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
});
