import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession } from '../../client/session.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup } from '../helpers.js';
import { STATUS } from './status-fixture.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());


/**
 * Stands in for a real daemon that loses a connection while it works on an acquire, which the real
 * one cannot be made to do on cue: on a real Unix socket where the client looks, it reads every acquire and
 * drops its connection without an answer; `afterAcquire` says whether it then lives on (it answers
 * GET /v1/status) or dies (it stops listening).
 */
async function droppingDaemon(afterAcquire: 'lives' | 'dies'): Promise<{ env: NodeJS.ProcessEnv; acquires: () => number }> {
  const runtimeDir = mkdtempSync('/tmp/sbx-resend-');
  chmodSync(runtimeDir, 0o700);
  let acquires = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    if (req.method === 'POST') {
      acquires += 1;
      req.socket.destroy();
      if (afterAcquire === 'dies') server.close();
      return;
    }
    const text = JSON.stringify(STATUS);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'sandboxd-protocol': String(PROTOCOL_VERSION) });
    res.end(text);
  });
  await new Promise<void>((resolve) => server.listen(path.join(runtimeDir, 'sandboxd.sock'), resolve));
  cleanup.add(() => {
    rmSync(runtimeDir, { recursive: true, force: true });
  });
  cleanup.add(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve(undefined);
        });
      }),
  );
  const env = { PATH: process.env.PATH, HOME: runtimeDir, SANDBOXD_RUNTIME_DIR: runtimeDir, SANDBOXD_STATE_DIR: runtimeDir, SANDBOXD_NO_AUTOSTART: '1' };
  return { env, acquires: () => acquires };
}

describe('an acquire the daemon read and never answered', () => {
  it('is not sent again while that daemon still answers: it may have made the session', async () => {
    const daemon = await droppingDaemon('lives');
    const acquire = acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false, env: daemon.env });
    await expect(acquire).rejects.toMatchObject({ code: 'DAEMON_TIMEOUT', message: expect.stringContaining('it is not sent twice') as string });
    expect(daemon.acquires()).toBe(1);
  });

  it('goes on to start a daemon when the one that read it is gone, its sessions with it', async () => {
    const daemon = await droppingDaemon('dies');
    // Auto-start is off here, so the path that would start a daemon and send again says so.
    const acquire = acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false, env: daemon.env });
    await expect(acquire).rejects.toMatchObject({ code: 'DAEMON_NOT_RUNNING', message: expect.stringContaining('auto-start is off') as string });
    expect(daemon.acquires()).toBe(1);
  });
});
