import { mkdtempSync, rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { createDaemon, DEFAULT_SETTINGS, type Daemon } from '../../daemon/daemon.js';
import { createLogger } from '../../daemon/logger.js';
import { resolvePaths } from '../../shared/paths.js';

const opened: { daemon: Daemon; dir: string }[] = [];
afterEach(async () => {
  for (const { daemon, dir } of opened.splice(0)) {
    await daemon.close().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The whole daemon in memory (STYLE 4): fastify's inject stands in for the Unix socket. */
function daemon(): Daemon {
  const dir = mkdtempSync('/tmp/sbx-http-');
  const created = createDaemon({
    platform: 'linux',
    paths: resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: dir }, uid: 0, home: dir }),
    hostHome: dir,
    clock: { now: () => Date.now() },
    probe: { startTime: () => Promise.resolve('1'), isSame: () => Promise.resolve(true) },
    logger: createLogger({ kind: 'silent' }),
    logPath: null,
    settings: DEFAULT_SETTINGS,
    uid: 0,
    requestShutdown: () => undefined,
    onTunnelChild: () => undefined,
  });
  opened.push({ daemon: created, dir });
  return created;
}

describe('HTTP adapter', () => {
  it('stamps the protocol version on every reply, errors included', async () => {
    const { app } = daemon();
    const ok = await app.inject({ method: 'GET', url: '/v1/status' });
    expect(ok.headers['sandboxd-protocol']).toBe('1');
    const missing = await app.inject({ method: 'GET', url: '/nope' });
    expect(missing.statusCode).toBe(404);
    expect(missing.headers['sandboxd-protocol']).toBe('1');
  });

  it('acquires a session without an agent and lists it', async () => {
    const { app } = daemon();
    const acquired = await app.inject({
      method: 'POST',
      url: '/v1/sessions',
      payload: { engine: 'docker', client: { pid: process.pid, cwd: '/' }, sshAgent: 'auto' },
    });
    expect(acquired.statusCode).toBe(201);
    expect(acquired.json()).toMatchObject({ session: { ssh: { status: 'skipped', reason: 'SSH_AUTH_SOCK is not set in the client environment' } }, leaseTtlMs: 30_000, heartbeatIntervalMs: 10_000 });
    const list = await app.inject({ method: 'GET', url: '/v1/sessions' });
    expect(list.json<{ sessions: unknown[] }>().sessions).toHaveLength(1);
  });

  it('answers SHUTTING_DOWN in the error shape while it closes', async () => {
    const subject = daemon();
    await subject.app.ready();
    const closing = subject.close();
    const reply = await subject.app.inject({ method: 'GET', url: '/v1/status' });
    await closing;
    expect(reply.statusCode).toBe(503);
    expect(reply.json()).toEqual({ error: { code: 'SHUTTING_DOWN', message: 'the daemon is shutting down', remedy: 'The daemon is stopping; retry in a moment.' } });
  });
});
