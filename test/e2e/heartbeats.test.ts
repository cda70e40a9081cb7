import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { listSessions } from '../../dist/client/index.js';
import { Cleanup, ROOT, cliEnv, makeSandbox, startDaemon, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const HELD = 20;

/** The urls of the requests the daemon logged at debug level (one JSON line each). */
function loggedRequests(logDir: string): string[] {
  let text: string;
  try {
    text = readFileSync(path.join(logDir, 'sandboxd.log'), 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((line) => line.includes('"msg":"request"'))
    .map((line) => {
      const { method, url } = JSON.parse(line) as { method: string; url: string };
      return `${method} ${url}`;
    });
}

describe('batched heartbeats (real daemon, a real client process)', () => {
  it('a process holding many sessions keeps them all with one request per interval; killed, they all end', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox, { SANDBOXD_LOG_LEVEL: 'debug' });
    // TTL 3 s: the client heartbeats every second, and a lease without them would be gone by the 4 s sweep.
    await startDaemon(env, cleanup, ['--lease-ttl', '3']);
    const script = `import { acquireSession } from ${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))};
      const held = [];
      for (let i = 0; i < ${String(HELD)}; i += 1) held.push(await acquireSession({ engine: 'podman', sshAgent: 'off' }));
      console.log(JSON.stringify(held.map((s) => s.id))); setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.add(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const ids = JSON.parse(await waitFor(() => /\[.*\]/.exec(out)?.[0], 'the client to acquire', 30_000)) as string[];
    expect(ids).toHaveLength(HELD);

    const batches = () => loggedRequests(sandbox.env.SANDBOXD_LOG_DIR).filter((request) => request === 'POST /v1/heartbeats').length;
    // Past the TTL with every lease held: four rounds since the last acquire.
    const before = batches();
    await waitFor(() => batches() >= before + 4, 'four heartbeat rounds', 15_000, 100);
    expect((await listSessions(env)).map((s) => s.id).sort()).toEqual([...ids].sort());
    const requests = loggedRequests(sandbox.env.SANDBOXD_LOG_DIR);
    expect(requests.filter((request) => request.endsWith('/heartbeat'))).toEqual([]);
    // One request per round for all twenty sessions, not one each.
    expect(batches()).toBeLessThan(HELD);

    child.kill('SIGKILL');
    await waitFor(async () => (await listSessions(env)).length === 0, 'the killed client\'s sessions to end', 15_000, 200);
  });
});
