import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { expect } from 'vitest';
import { CLI } from '../helpers.js';

/**
 * What the git end-to-end tests share: the host's git as the user runs it next (no sandbox
 * settings, trusting the tests' repositories whatever their owner), repositories made with it, and
 * `sandboxd run` of a real container in one.
 */
export const SETUP_IDENTITY = ['-c', 'user.name=Setup', '-c', 'user.email=setup@example.com', '-c', 'commit.gpgsign=false'];

export function hostGit(cwd: string, ...args: string[]) {
  return execa('git', ['-c', 'safe.directory=*', ...SETUP_IDENTITY, ...args], {
    cwd,
    env: { HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' },
    reject: false,
  });
}

/** A repository `dir` with one commit on `main`, owned by `owner`. */
export async function plainRepo(dir: string, owner = '0:0'): Promise<string> {
  mkdirSync(dir, { recursive: true });
  await hostGit(dir, 'init', '-q', '-b', 'main');
  writeFileSync(path.join(dir, 'file.txt'), 'hello\n');
  await hostGit(dir, 'add', '.');
  await hostGit(dir, 'commit', '-q', '-m', 'init');
  await execa('chown', ['-R', owner, dir]);
  return dir;
}

/** Every ref of a repository with its value. */
export async function refsOf(repo: string): Promise<Map<string, string>> {
  const out = (await hostGit(repo, 'for-each-ref', '--format=%(refname) %(objectname)')).stdout;
  return new Map(out.split('\n').filter((line) => line !== '').map((line) => line.split(' ') as [string, string]));
}

/** `git fsck --strict` of the host's repository: what every test leaves must be whole. */
export async function fsckStrict(repo: string): Promise<{ code: number | undefined; out: string }> {
  // Dangling objects are not damage (a merge's autostash leaves one).
  const result = await hostGit(repo, 'fsck', '--strict', '--no-dangling', '--no-progress');
  return { code: result.exitCode, out: `${result.stdout}${result.stderr}` };
}

export interface RunOptions {
  /** `--user` of the container (root when unset). */
  user?: string;
  /** sandboxd's own options, before `--`. */
  flags?: string[];
  /** More `run` options, before the image. */
  runArgs?: string[];
  timeoutMs?: number;
}

/** `sandboxd run` of `script` in a real container, in `cwd`. */
export function runIn(env: NodeJS.ProcessEnv, image: string, cwd: string, script: string, options: RunOptions = {}): ResultPromise<{ cwd: string; env: NodeJS.ProcessEnv; extendEnv: false; reject: false; timeout: number }> {
  const user = options.user === undefined ? [] : ['--user', options.user];
  return execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', ...(options.flags ?? ['--ssh-agent', 'off']), '--', '--rm', '--network', 'none', ...user, ...(options.runArgs ?? []), image, 'sh', '-c', script], {
    cwd,
    env,
    extendEnv: false,
    reject: false,
    timeout: options.timeoutMs ?? 120_000,
  });
}

/** A script line that waits for `file` to exist (the test's go-ahead), bounded. */
export function waitForFile(file: string): string {
  return `i=0; while [ ! -e ${file} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done`;
}

/**
 * The flow every engine must carry: a commit made inside, a branch checked out, then the reflog
 * planted as a link to a host file (`startup`, which the container cannot see). `run` runs the
 * script in a container in `dir`; afterwards the commit is home, the host's HEAD and index
 * followed, and checking the host's main out again writes nothing through the link.
 */
export async function commitComesHome(dir: string, startup: string, run: (script: string) => Promise<{ exitCode?: number; stderr: string }>): Promise<void> {
  const text = "# the host user's\n";
  writeFileSync(startup, text);
  const result = await run(['echo more >> file.txt', 'git -c user.name=x -c user.email=y commit -q -am "made inside"', 'git checkout -q -b topic', `ln -sf ${startup} .git/logs/HEAD`].join(' && '));
  expect({ code: result.exitCode, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
  expect((await hostGit(dir, 'log', '-1', '--format=%s', 'topic')).stdout).toBe('made inside');
  expect({ head: (await hostGit(dir, 'symbolic-ref', 'HEAD')).stdout, status: (await hostGit(dir, 'status', '--porcelain')).stdout }).toEqual({ head: 'refs/heads/topic', status: '' });
  await hostGit(dir, 'checkout', '-q', 'main');
  expect(readFileSync(startup, 'utf8')).toBe(text);
  expect(await fsckStrict(dir)).toEqual({ code: 0, out: '' });
}
