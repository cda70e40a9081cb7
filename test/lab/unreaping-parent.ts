import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Cleanup, waitFor } from '../helpers.js';

/**
 * A long-lived client (as llxprt is) that auto-starts the daemon through the client library and
 * then blocks its event loop, so it never reaps the daemon it spawned. Kill the daemon with -9 and
 * it stays a zombie — pid taken, /proc entry present, kill(pid, 0) succeeding — until this parent
 * is killed: the state in which a restarted daemon once waited behind it until its start timed out.
 */
export async function daemonOfUnreapingParent(clientModule: string, env: NodeJS.ProcessEnv, cleanup: Cleanup): Promise<number> {
  const script = [
    `const { clientPaths, ensureDaemon } = await import(${JSON.stringify(clientModule)});`,
    'const status = await ensureDaemon({ paths: clientPaths(process.env), env: process.env, autoStart: true });',
    "process.stdout.write(`${status.pid}\\n`);",
    'Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);',
  ].join('\n');
  const parent = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanup.add(() => parent.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  parent.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  parent.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  await waitFor(() => stdout.includes('\n') || parent.exitCode !== null, 'the parent to auto-start the daemon', 30_000);
  if (!stdout.includes('\n')) throw new Error(`the parent exited ${String(parent.exitCode)}: ${stderr}`);
  return Number(stdout.trim());
}

/** The state letter of /proc/<pid>/stat (`Z` for a zombie), or null when the pid is gone. */
export function procState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

/** kill -9, then wait until the daemon is the zombie its parent will not reap. */
export async function killToZombie(pid: number): Promise<void> {
  process.kill(pid, 'SIGKILL');
  await waitFor(() => procState(pid) === 'Z', `daemon ${pid} to become a zombie`);
}
