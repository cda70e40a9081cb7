import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession, listSessions, listTunnels } from '../../dist/client/index.js';
import { Cleanup, CLI, ROOT, cli, cliEnv, makeSandbox, startAgent, startDaemon, waitFor, type Sandbox } from '../helpers.js';
import { plainRepo } from './git-lab.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Reply {
  status: number;
  body: unknown;
}

function raw(socketPath: string, method: string, route: string, body?: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    // The client's protocol version, as the library sends it (a request without it is protocol 1).
    const req = http.request({ socketPath, method, path: route, headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION), ...headers }, agent: false, timeout: 5_000 }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString()));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const JSON_HEADERS = { 'content-type': 'application/json' };

async function daemonIn(sandbox: Sandbox, args: string[] = []): Promise<{ env: NodeJS.ProcessEnv; socket: string }> {
  const env = cliEnv(sandbox);
  await startDaemon(env, cleanup, args);
  return { env, socket: path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock') };
}

/** A client process holding a session with heartbeats until it is killed; its session id. */
async function heldClient(env: NodeJS.ProcessEnv, label: string) {
  const script = `import { acquireSession } from ${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))};
    const s = await acquireSession({ engine: 'podman', sshAgent: 'off', label: ${JSON.stringify(label)} });
    console.log(s.id); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  cleanup.add(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const id = await waitFor(() => /ses_\w+/.exec(out)?.[0], 'the client to acquire');
  return { child, id };
}

describe('sessions (real daemon on a real Unix socket)', () => {
  it('answers malformed requests with 4xx and the error shape, and keeps serving', async () => {
    const sandbox = makeSandbox(cleanup);
    const { socket } = await daemonIn(sandbox);
    const good = { engine: 'podman', client: { pid: process.pid, cwd: '/' }, sshAgent: 'off' };

    const broken = await raw(socket, 'POST', '/v1/sessions', '{"engine":', JSON_HEADERS);
    expect(broken.status).toBe(400);
    expect(broken.body).toMatchObject({ error: { code: 'BAD_REQUEST' } });

    const wrongType = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...good, engine: 42 }), JSON_HEADERS);
    expect(wrongType.status).toBe(400);
    expect(wrongType.body).toMatchObject({ error: { code: 'BAD_REQUEST', message: expect.stringContaining('engine') as string } });

    const unknownField = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...good, surprise: true }), JSON_HEADERS);
    expect(unknownField.status).toBe(400);
    expect(unknownField.body).toMatchObject({ error: { code: 'BAD_REQUEST', message: expect.stringContaining('surprise') as string } });

    const relativeCwd = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...good, client: { pid: 1, cwd: 'rel' } }), JSON_HEADERS);
    expect(relativeCwd.body).toMatchObject({ error: { code: 'BAD_REQUEST', message: expect.stringContaining('client.cwd: must be an absolute path') as string } });

    const huge = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...good, label: 'x'.repeat(70_000) }), JSON_HEADERS);
    expect(huge.status).toBe(413);
    expect(huge.body).toMatchObject({ error: { code: 'PAYLOAD_TOO_LARGE', message: 'request body is larger than 64 KiB' } });

    const text = await raw(socket, 'POST', '/v1/sessions', 'hello', { 'content-type': 'text/plain' });
    expect(text.status).toBe(415);
    expect(text.body).toMatchObject({ error: { code: 'UNSUPPORTED_MEDIA_TYPE' } });

    const nowhere = await raw(socket, 'GET', '/v2/everything');
    expect(nowhere.status).toBe(404);
    expect(nowhere.body).toEqual({
      error: { code: 'NOT_FOUND', message: 'no route GET /v2/everything', remedy: 'Check the route; this daemon speaks /v1.' },
    });

    const ghost = await raw(socket, 'POST', '/v1/sessions/ses_doesnotexist/heartbeat');
    expect(ghost.status).toBe(404);
    expect(ghost.body).toMatchObject({ error: { code: 'SESSION_NOT_FOUND', message: 'no session ses_doesnotexist' } });

    const badId = await raw(socket, 'DELETE', '/v1/sessions/..%2F..%2Fetc');
    expect(badId.status).toBe(400);

    const ok = await raw(socket, 'POST', '/v1/sessions', JSON.stringify(good), JSON_HEADERS);
    expect(ok.status).toBe(201);
    const status = await raw(socket, 'GET', '/v1/status');
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ counts: { sessions: 1 } });
  });

  it('reaps the session of a client that was killed within 10 s', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox);
    const { child, id } = await heldClient(env, 'doomed');
    const sessions = await listSessions(env);
    expect(sessions.map((s) => s.id)).toEqual([id]);
    expect(sessions[0]).toMatchObject({ label: 'doomed', clientPid: child.pid });

    child.kill('SIGKILL');
    const killedAt = Date.now();
    await waitFor(async () => (await listSessions(env)).length === 0, 'the session to be reaped', 12_000, 200);
    expect(Date.now() - killedAt).toBeLessThanOrEqual(10_500);
  });

  it('keeps the lease of a stopped client (Ctrl-Z) past the TTL, while a silent client\'s lease ends', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox, ['--lease-ttl', '1']);
    const { child, id } = await heldClient(env, 'suspended');
    process.kill(child.pid ?? 0, 'SIGSTOP');
    cleanup.add(() => process.kill(child.pid ?? 0, 'SIGCONT'));
    // The control: a live client that sends no heartbeat; its lease ends after the same TTL.
    const silent = await acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false, env });
    const log = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
    await waitFor(() => readFileSync(log, 'utf8').includes('client stopped; lease kept'), 'the sweep to see the stopped client', 15_000, 200);
    await waitFor(async () => !(await listSessions(env)).some((session) => session.id === silent.id), 'the silent lease to end', 15_000, 200);
    const [stopped] = await listSessions(env);
    expect(stopped?.id).toBe(id);
    process.kill(child.pid ?? 0, 'SIGCONT');
    await waitFor(async () => {
      const [held] = await listSessions(env);
      return held !== undefined && held.lastHeartbeatAt !== stopped?.lastHeartbeatAt;
    }, 'a heartbeat after SIGCONT', 15_000, 200);
    expect((await listSessions(env)).map((session) => session.id)).toEqual([id]);
    await silent.release();
  });

  it('ends a session whose heartbeats stop for longer than the lease TTL', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox, ['--lease-ttl', '1']);
    const session = await acquireSession({ engine: 'docker', sshAgent: 'off', heartbeat: false, env });
    expect((await listSessions(env)).map((s) => s.id)).toEqual([session.id]);
    await waitFor(async () => (await listSessions(env)).length === 0, 'the lease to expire', 8_000, 200);
    await session.release();
  });

  it('keeps a session alive with heartbeats past the TTL, and release is idempotent', async () => {
    const sandbox = makeSandbox(cleanup);
    // TTL 2 s, heartbeats every 1 s.
    const { env } = await daemonIn(sandbox, ['--lease-ttl', '2']);
    const session = await acquireSession({ engine: 'podman', sshAgent: 'off', env });
    // The control, acquired after it: once a sweep has ended this one's lease, the same TTL has
    // passed for the session that heartbeats.
    const silent = await acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false, env });
    await waitFor(async () => !(await listSessions(env)).some((listed) => listed.id === silent.id), 'the silent lease to end', 10_000, 100);
    const [listed] = await listSessions(env);
    expect(listed?.id).toBe(session.id);
    expect(Date.parse(listed?.lastHeartbeatAt ?? '')).toBeGreaterThan(Date.parse(listed?.createdAt ?? ''));
    await session.release();
    await session.release();
    expect(await listSessions(env)).toEqual([]);
    await silent.release();
  });

  it('releases with `await using`', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox);
    {
      await using session = await acquireSession({ engine: 'podman', sshAgent: 'off', env });
      expect((await listSessions(env)).map((s) => s.id)).toEqual([session.id]);
    }
    expect(await listSessions(env)).toEqual([]);
  });

  it('ssh-agent on/auto/off: error, skip with a reason, skip', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox);
    const noAgent = { ...env, SSH_AUTH_SOCK: '' };

    const on = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'on', '--json'], noAgent);
    expect(on.exitCode).toBe(1);
    expect(JSON.parse(on.stdout)).toMatchObject({
      error: { code: 'SSH_AGENT_UNAVAILABLE', message: 'ssh-agent is on but SSH_AUTH_SOCK is not set in the client environment' },
    });

    const missing = path.join(sandbox.dir, 'gone.sock');
    const onMissing = await cli(['plan', '--engine', 'podman', '--ssh-agent', 'on'], { ...env, SSH_AUTH_SOCK: missing });
    expect(onMissing.stderr).toContain(`sandboxd: ssh-agent is on but SSH_AUTH_SOCK ${missing} does not exist`);
    expect(onMissing.stderr).toContain('ssh-add');

    const auto = JSON.parse((await cli(['plan', '--engine', 'podman', '--json'], noAgent)).stdout) as { session: { ssh: unknown }; plan: { env: Record<string, string> } };
    expect(auto.session.ssh).toEqual({ status: 'skipped', reason: 'SSH_AUTH_SOCK is not set in the client environment' });
    expect(auto.plan.env.SSH_AUTH_SOCK).toBeUndefined();

    const agent = await startAgent(sandbox.dir, cleanup);
    const off = JSON.parse((await cli(['plan', '--engine', 'podman', '--ssh-agent', 'off', '--json'], { ...env, SSH_AUTH_SOCK: agent.socket })).stdout) as { session: { ssh: unknown } };
    expect(off.session.ssh).toEqual({ status: 'skipped', reason: 'ssh-agent is off for this session' });
  });

  it('serves the client\'s own agent through one relay, a socket of its own per session: 0711 dir, 0666 socket, key listed', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox);
    const agent = await startAgent(sandbox.dir, cleanup);
    // The daemon's own environment has no agent: the session's SSH_AUTH_SOCK is what counts.
    const clientEnv = { ...env, SSH_AUTH_SOCK: agent.socket };
    const a = await acquireSession({ engine: 'podman', env: clientEnv, heartbeat: false });
    // No Docker engine runs here: the mount bridge is asked for, as on a host whose engine shares its kernel.
    const b = await acquireSession({ engine: 'docker', sshBridge: 'mount', env: clientEnv, heartbeat: false });
    cleanup.add(() => Promise.all([a.release(), b.release()]));

    expect(a.info.ssh).toMatchObject({ status: 'forwarded', bridge: 'mount', socket: '/run/sandboxd/ssh/agent.sock', hostAgentSocket: agent.socket });
    const mount = a.plan.mounts.find((m) => m.purpose === 'ssh agent');
    expect(mount).toMatchObject({ target: '/run/sandboxd/ssh', readOnly: true, relabel: 'z' });
    expect(b.plan.mounts.find((m) => m.purpose === 'ssh agent')).not.toHaveProperty('relabel');
    expect(a.plan.args).toContain(`${mount?.source ?? ''}:/run/sandboxd/ssh:ro,z`);
    expect(a.plan.env.SSH_AUTH_SOCK).toBe('/run/sandboxd/ssh/agent.sock');

    const dir = mount?.source ?? '';
    expect(statSync(dir).mode & 0o777).toBe(0o711);
    expect(statSync(path.join(dir, 'agent.sock')).mode & 0o777).toBe(0o666);
    const listed = await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: path.join(dir, 'agent.sock') } });
    expect(listed.stdout).toContain(agent.fingerprint);

    const tunnels = await listTunnels(env);
    expect(tunnels).toHaveLength(1);
    expect(tunnels[0]).toMatchObject({ kind: 'relay', refs: 2, endpoints: 2, state: 'ready', hostAgentSocket: agent.socket });
    expect(b.plan.mounts.find((m) => m.purpose === 'ssh agent')?.source).not.toBe(dir);
    await a.release();
    await b.release();
    expect((await listTunnels(env))[0]).toMatchObject({ refs: 0, state: 'draining' });

    const table = await cli(['tunnels', 'ls'], env);
    expect(table.stdout).toMatch(/^ID\s+KIND\s+CONNECTION\s+STATE/);
    expect(table.stdout).toContain('draining');
    const removed = await cli(['tunnels', 'rm', tunnels[0]?.id ?? ''], env);
    expect(removed.stdout).toContain('removed');
    expect(await listTunnels(env)).toEqual([]);
    const again = await cli(['tunnels', 'rm', tunnels[0]?.id ?? '', '--json'], env);
    expect(JSON.parse(again.stdout)).toMatchObject({ error: { code: 'TUNNEL_NOT_FOUND' } });
  });

  it('lists sessions as a table and as JSON', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env } = await daemonIn(sandbox);
    expect((await cli(['sessions', 'ls'], env)).stdout).toBe('no sessions');
    const repo = await plainRepo(path.join(sandbox.dir, 'repo'));
    const session = await acquireSession({ engine: 'podman', sshAgent: 'off', env, label: 'llxprt', cwd: repo });
    cleanup.add(() => session.release());
    const outside = await acquireSession({ engine: 'podman', sshAgent: 'off', env, label: 'plain', cwd: sandbox.dir });
    cleanup.add(() => outside.release());
    const table = (await cli(['sessions', 'ls'], env)).stdout.split('\n');
    expect(table[0]).toMatch(/^ID\s+ENGINE\s+LABEL\s+PID\s+AGE\s+SSH\s+REFUSED\s+CONTAINER\s+GIT$/);
    const [inRepo, notInRepo] = [session.id, outside.id].map((id) => table.find((row) => row.startsWith(id)) ?? '');
    // A repository's sandbox git dir where nothing waits; no repository, no git.
    expect(inRepo).toMatch(/llxprt .*not started\s+synced$/);
    expect(notInRepo).toMatch(/plain .*not started\s+-$/);
    const json = JSON.parse((await cli(['sessions', 'ls', '--json'], env)).stdout) as { id: string }[];
    expect(json.map((s) => s.id).sort()).toEqual([session.id, outside.id].sort());
  });

  it('survives fd exhaustion: under ulimit -n 256, 800 concurrent acquires get 201 or 503 DAEMON_BUSY, then status answers', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const socket = path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock');
    const daemon = spawn('sh', ['-c', 'ulimit -n 256; exec "$0" "$1" daemon', process.execPath, CLI], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    cleanup.add(() => daemon.kill('SIGKILL'));
    let stderr = '';
    daemon.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor(() => stderr.includes('listening on') || daemon.exitCode !== null, 'the daemon to listen');
    const body = JSON.stringify({ engine: 'docker', client: { pid: process.pid, cwd: sandbox.dir, path: process.env.PATH }, sshAgent: 'off' });
    const replies = await Promise.all(
      Array.from({ length: 800 }, () => raw(socket, 'POST', '/v1/sessions', body, JSON_HEADERS).catch((error: unknown) => error as Error)),
    );
    const answered = replies.filter((reply): reply is Reply => !(reply instanceof Error));
    // Connections the kernel or the daemon turned away never got an HTTP answer; every answer is one of these.
    for (const reply of answered) {
      if (reply.status !== 201) expect(reply).toMatchObject({ status: 503, body: { error: { code: 'DAEMON_BUSY' } } });
    }
    expect(daemon.exitCode).toBeNull();
    const status = await raw(socket, 'GET', '/v1/status');
    expect(status.status).toBe(200);
    const ok = await raw(socket, 'POST', '/v1/sessions', body, JSON_HEADERS);
    expect(ok.status).toBe(201);
  });

  it('keeps the session of a live client across a daemon stall longer than the lease TTL', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const daemon = await startDaemon(env, cleanup, ['--lease-ttl', '1']);
    const session = await acquireSession({ engine: 'docker', sshAgent: 'off', env });
    cleanup.add(() => session.release());
    const id = session.id;
    // Stopped past the TTL and past three 2 s sweep intervals, what the daemon counts as a stall
    // (a shorter stop is an ordinary late sweep, and would not be this test).
    process.kill(daemon.pid, 'SIGSTOP');
    cleanup.add(() => process.kill(daemon.pid, 'SIGCONT'));
    await new Promise((resolve) => setTimeout(resolve, 6_500));
    process.kill(daemon.pid, 'SIGCONT');
    const resumedAt = Date.now();
    // The first sweep after the resume saw the stall, and a heartbeat came after it.
    const log = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
    await waitFor(() => readFileSync(log, 'utf8').includes('the daemon was stalled'), 'the sweep after the resume', 10_000, 100);
    await waitFor(async () => (await listSessions(env)).some((listed) => Date.parse(listed.lastHeartbeatAt) > resumedAt), 'a heartbeat after the resume', 10_000, 100);
    expect((await listSessions(env)).map((s) => s.id)).toEqual([id]);
    expect(session.id).toBe(id);
  });

  it('renews a session the daemon lost: same request, new id, heartbeats go on', async () => {
    const sandbox = makeSandbox(cleanup);
    const { env, socket } = await daemonIn(sandbox, ['--lease-ttl', '3']);
    const session = await acquireSession({ engine: 'docker', sshAgent: 'off', env, label: 'renewed' });
    cleanup.add(() => session.release());
    const first = session.id;
    // Stands in for a restarted daemon or a reaped lease: the daemon no longer knows the session.
    expect((await raw(socket, 'DELETE', `/v1/sessions/${first}`)).body).toMatchObject({ released: true });
    const renewed = await waitFor(async () => (await listSessions(env)).find((s) => s.id !== first), 'the client to renew its lease', 10_000, 200);
    expect(renewed).toMatchObject({ label: 'renewed', clientPid: process.pid, engine: 'docker' });
    expect(session.id).toBe(renewed.id);
    // The heartbeats go on for the new id (the first comes a heartbeat interval after the renewal).
    await waitFor(async () => {
      const [held] = await listSessions(env);
      return held?.id === renewed.id && Date.parse(held.lastHeartbeatAt) >= Date.parse(held.createdAt) + 500;
    }, 'a heartbeat for the renewed session', 10_000, 100);
    await session.release();
    expect(await listSessions(env)).toEqual([]);
  });

  it('lists in its debug log each subprocess it ran, with its exit code and duration', async () => {
    const sandbox = makeSandbox(cleanup);
    const repo = path.join(sandbox.dir, 'repo');
    await execa('git', ['init', '-q', repo]);
    const env = cliEnv(sandbox, { SANDBOXD_LOG_LEVEL: 'debug' });
    await startDaemon(env, cleanup);
    const session = await acquireSession({ engine: 'docker', sshAgent: 'off', heartbeat: false, env, cwd: repo });
    await session.release();
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8').trim().split('\n').map((line) => JSON.parse(line) as { msg: string; file?: string });
    expect(log.filter((line) => line.msg === 'subprocess' && line.file?.endsWith('/git') === true)).toContainEqual(
      expect.objectContaining({ module: 'subprocess', args: expect.arrayContaining(['config']) as unknown, exitCode: 0, ms: expect.any(Number) as unknown }),
    );
  });

  it('refuses a cwd that is not a directory and env values with NUL, naming them (4xx, not INTERNAL)', async () => {
    const sandbox = makeSandbox(cleanup);
    const { socket } = await daemonIn(sandbox);
    const base = { engine: 'docker', sshAgent: 'off' };
    const devNull = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...base, client: { pid: process.pid, cwd: '/dev/null', path: process.env.PATH } }), JSON_HEADERS);
    expect(devNull).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST', message: "the client's cwd /dev/null is not a directory" } } });
    const nul = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...base, client: { pid: process.pid, cwd: '/', env: { XDG_CONFIG_HOME: '/a\u0000b' } } }), JSON_HEADERS);
    expect(nul).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST', message: 'invalid session request: client.env.XDG_CONFIG_HOME: must not contain NUL' } } });
    const nulPath = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...base, client: { pid: process.pid, cwd: '/', path: '/usr/bin\u0000' } }), JSON_HEADERS);
    expect(nulPath).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST', message: 'invalid session request: client.path: must not contain NUL' } } });
    const nulPassEnv = await raw(socket, 'POST', '/v1/sessions', JSON.stringify({ ...base, client: { pid: process.pid, cwd: '/' }, passEnv: { TOKEN: 'a\u0000' } }), JSON_HEADERS);
    expect(nulPassEnv).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST', message: 'invalid session request: passEnv.TOKEN: must not contain NUL' } } });
  });
});
