import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { acquireSession } from '../client/index.js';
import { median, percentile, timed } from './stats.js';

/**
 * (12) the sandbox's own git dir: what its first acquire in a repository with many refs costs
 * (the host's state copied in), and how long a commit made in it takes to reach the host's
 * repository (the watch, the debounce, the staging, the checked fetch and the compare-and-swap).
 */
export interface GitRowsInput {
  env: NodeJS.ProcessEnv;
  dir: string;
  firstRuns: number;
  commits: number;
}

const GIT_ENV = { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', HOME: '/nonexistent', PATH: process.env.PATH ?? '' };
const IDENTITY = ['-c', 'user.name=Bench', '-c', 'user.email=bench@example.com', '-c', 'commit.gpgsign=false'];
const REFS = 100_000;
const PACKED_BYTES = 200 * 1024 * 1024;

function git(cwd: string, ...args: string[]) {
  return execa('git', [...IDENTITY, ...args], { cwd, env: GIT_ENV });
}

/**
 * A repository whose packed-refs holds REFS refs and weighs PACKED_BYTES: the names are long
 * (what makes the file that large with that many refs), all pointing at its one commit.
 */
async function manyRefs(dir: string): Promise<string> {
  const repo = path.join(dir, 'many-refs');
  mkdirSync(repo, { recursive: true });
  await git(repo, 'init', '-q', '-b', 'main');
  await git(repo, 'commit', '-q', '--allow-empty', '-m', 'one');
  const oid = (await git(repo, 'rev-parse', 'HEAD')).stdout;
  const pad = 'x'.repeat(Math.max(1, Math.floor(PACKED_BYTES / REFS) - 64));
  const lines = ['# pack-refs with: peeled fully-peeled sorted '];
  for (let index = 0; index < REFS; index += 1) lines.push(`${oid} refs/tags/${pad}/${String(index).padStart(6, '0')}`);
  lines.push(`${oid} refs/heads/main`);
  // Sorted as git sorts them (byte order), so git reads it as it would its own.
  const header = lines.shift() ?? '';
  lines.sort();
  writeFileSync(path.join(repo, '.git', 'packed-refs'), `${[header, ...lines].join('\n')}\n`);
  await execa('rm', ['-f', path.join(repo, '.git', 'refs', 'heads', 'main')]);
  return repo;
}

/** The sandbox git dir a plan mounts at the repository's git dir. */
function sandboxGitDir(plan: { mounts: { source: string; purpose: string }[] }): string {
  const mount = plan.mounts.find((candidate) => candidate.purpose === "repository git dir (the sandbox's own)");
  if (mount === undefined) throw new Error('the plan mounts no sandbox git dir');
  return mount.source;
}

export async function gitRows(input: GitRowsInput): Promise<[string, string, string][]> {
  const { env } = input;
  const template = await manyRefs(input.dir);
  const packedMb = (readFileSync(path.join(template, '.git', 'packed-refs')).length / 1024 / 1024).toFixed(0);
  const first: number[] = [];
  for (let run = 0; run < input.firstRuns; run += 1) {
    const repo = path.join(input.dir, `many-refs-${String(run)}`);
    await execa('cp', ['-a', template, repo]);
    let session: Awaited<ReturnType<typeof acquireSession>> | null = null;
    first.push(await timed(async () => (session = await acquireSession({ engine: 'podman', env, heartbeat: false, sshAgent: 'off', cwd: repo }))));
    await (session as Awaited<ReturnType<typeof acquireSession>> | null)?.release();
    await execa('rm', ['-rf', repo]);
  }

  // A commit made in the sandbox's git dir as a container's git makes it (the host's objects
  // through the alternates), timed from its `git commit` returning to the host's branch naming it.
  const repo = path.join(input.dir, 'commits');
  mkdirSync(repo, { recursive: true });
  await git(repo, 'init', '-q', '-b', 'main');
  await git(repo, 'commit', '-q', '--allow-empty', '-m', 'start');
  const session = await acquireSession({ engine: 'podman', env, sshAgent: 'off', cwd: repo });
  const sandbox = sandboxGitDir(session.plan);
  const inside = { ...GIT_ENV, GIT_DIR: sandbox, GIT_WORK_TREE: repo, GIT_ALTERNATE_OBJECT_DIRECTORIES: path.join(repo, '.git', 'objects') };
  const hostRef = path.join(repo, '.git', 'refs', 'heads', 'main');
  const latency: number[] = [];
  try {
    for (let commit = 0; commit < input.commits; commit += 1) {
      await execa('git', [...IDENTITY, 'commit', '-q', '--allow-empty', '-m', `inside ${String(commit)}`], { cwd: repo, env: inside });
      const start = performance.now();
      const oid = readFileSync(path.join(sandbox, 'refs', 'heads', 'main'), 'utf8').trim();
      const deadline = start + 30_000;
      while (!(existsSync(hostRef) && readFileSync(hostRef, 'utf8').trim() === oid)) {
        if (performance.now() > deadline) throw new Error(`commit ${String(commit)} did not reach the host within 30 s`);
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      latency.push(performance.now() - start);
    }
  } finally {
    await session.release();
  }
  return [
    [`(12) first acquire in a repository: ${String(REFS)} refs, a ${packedMb} MB packed-refs`, `${median(first).toFixed(0)} ms`, `max ${Math.max(...first).toFixed(0)} ms of ${String(input.firstRuns)}; target < 1000 ms (the host's state copied into the sandbox's git dir)`],
    ['(12) commit inside -> on the host p50', `${median(latency).toFixed(0)} ms`, `p99 ${percentile(latency, 99).toFixed(0)} ms of ${String(input.commits)} commits; target p99 <= 1000 ms`],
  ];
}
