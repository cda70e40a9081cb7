import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { acquireSession, SandboxdError } from '../../client/index.js';

/**
 * One soak client process: acquire → use → release, over and over, through the library as a CLI
 * would, until SIGTERM (then it finishes the cycle it is in). "Use" asks the agent for its keys
 * through the socket the plan serves. Prints one JSON line per cycle for the orchestrator.
 *
 * With SOAK_PLANT set (the planter, one per phase, its cwd a repository of its own), "use" is also
 * what a hostile sandbox does under its mounts: one file per cycle where the host's git would
 * follow or run it, written where the container sees `.git` (the sandbox's own git dir, the mount
 * the plan puts there). It prints `{ planted, content }` with the host's path of that file: the
 * invariant is that the host's git dir never holds what the sandbox wrote, during the session and
 * after its commits came home.
 */
type Cycle = { ok: true; acquireMs: number; used: boolean } | { ok: false; code: string };

const state = { stopping: false };
process.on('SIGTERM', () => {
  state.stopping = true;
});

function report(cycle: Cycle): void {
  process.stdout.write(`${JSON.stringify(cycle)}\n`);
}

/** ssh-add -l through the served socket (the lab's "VM" path is on this host). */
function agentAnswers(socketDir: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: path.join(socketDir, 'agent.sock') }, timeout: 5_000 }, (error) => {
      resolve(error === null);
    });
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One plant of each kind in turn: a redirect, foreign objects, a hook in a new submodule git dir, a worktree led elsewhere. */
function plant(cycle: number, mounts: readonly { source: string; target: string }[]): void {
  const hostGitDir = path.join(process.cwd(), '.git');
  const gitDir = mounts.find((mount) => mount.target === hostGitDir)?.source;
  if (gitDir === undefined) throw new Error(`the plan mounts nothing at ${hostGitDir}`);
  const tag = `${String(process.pid)}-${String(cycle)}`;
  const content = `/elsewhere/${tag}\n`;
  const kinds = [
    () => path.join(gitDir, 'commondir'),
    () => path.join(gitDir, 'objects', 'info', 'alternates'),
    () => {
      const module = path.join(gitDir, 'modules', `p${tag}`);
      mkdirSync(path.join(module, 'hooks'), { recursive: true });
      writeFileSync(path.join(module, 'HEAD'), 'ref: refs/heads/main\n');
      return path.join(module, 'hooks', 'post-checkout');
    },
    () => {
      const admin = path.join(gitDir, 'worktrees', `p${tag}`);
      mkdirSync(admin, { recursive: true });
      return path.join(admin, 'commondir');
    },
  ];
  const file = (kinds[cycle % kinds.length] ?? kinds[0])?.() ?? '';
  writeFileSync(file, content);
  process.stdout.write(`${JSON.stringify({ planted: path.join(hostGitDir, path.relative(gitDir, file)), content })}\n`);
}

let cycles = 0;

while (!state.stopping) {
  const start = performance.now();
  try {
    const session = await acquireSession({ engine: 'podman', label: 'soak' });
    const acquireMs = performance.now() - start;
    const agentDir = session.plan.mounts.find((mount) => mount.purpose === 'ssh agent')?.source;
    const used = agentDir !== undefined && (await agentAnswers(agentDir));
    if (process.env.SOAK_PLANT === '1') plant(cycles, session.plan.mounts);
    cycles += 1;
    await sleep(Math.random() * 300);
    await session.release();
    report({ ok: true, acquireMs, used });
  } catch (error) {
    report({ ok: false, code: error instanceof SandboxdError ? error.code : 'UNEXPECTED' });
    await sleep(200);
  }
}
