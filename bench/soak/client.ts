import { execFile } from 'node:child_process';
import path from 'node:path';
import { acquireSession, SandboxdError } from '../../client/index.js';

/**
 * One soak client process: acquire → use → release, over and over, through the library as a CLI
 * would, until SIGTERM (then it finishes the cycle it is in). "Use" asks the agent for its keys
 * through the socket the plan serves. Prints one JSON line per cycle for the orchestrator.
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

while (!state.stopping) {
  const start = performance.now();
  try {
    const session = await acquireSession({ engine: 'podman', label: 'soak' });
    const acquireMs = performance.now() - start;
    const agentDir = session.plan.mounts.find((mount) => mount.purpose === 'ssh agent')?.source;
    const used = agentDir !== undefined && (await agentAnswers(agentDir));
    await sleep(Math.random() * 300);
    await session.release();
    report({ ok: true, acquireMs, used });
  } catch (error) {
    report({ ok: false, code: error instanceof SandboxdError ? error.code : 'UNEXPECTED' });
    await sleep(200);
  }
}
