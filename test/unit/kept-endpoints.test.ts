import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ServedAgent } from '../../daemon/bridges/bridge.js';
import { EndpointRecords, type KeptCredentials, type KeptEndpoint, type KeptSession } from '../../daemon/bridges/endpoint-records.js';
import { KeptEndpoints } from '../../daemon/bridges/kept-endpoints.js';
import { createLogger } from '../../daemon/os/logger.js';
import { Cleanup } from '../helpers.js';
import { fakeProbe } from './fake-probe.js';
import { ManualTime } from './manual-time.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());
const logger = createLogger({ kind: 'silent' });

function stateDir(): string {
  const dir = mkdtempSync('/tmp/sbx-kept-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

const relay = (dir: string, name: string | null = null, upstream = '/agent.sock'): KeptEndpoint => ({ kind: 'relay', name, upstream, dir });
const CREDENTIALS = { hosts: ['github.com', 'git.example.com:8443'], path: '/usr/bin' };
/** A session's git credential socket on the relay, with what it answers. */
const credential = (dir: string, credentials: KeptCredentials = CREDENTIALS): KeptEndpoint => ({ kind: 'relay', name: 'git-credential', upstream: '/rt/git-credential.sock', dir, credentials });
const session = (sessionId: string, clientPid: number, endpoints: KeptEndpoint[], clientStartTime: string | null = 't0'): KeptSession => ({ sessionId, clientPid, clientStartTime, endpoints });

/** Kept endpoints over a real records file; `reopened` and `released` say what happened to each socket. */
async function kept(recorded: KeptSession[], live: KeptSession[] = [], hold?: Promise<void>) {
  const dir = stateDir();
  const records = new EndpointRecords(dir, logger);
  await records.save(recorded);
  const time = new ManualTime();
  const probe = fakeProbe();
  probe.processes.set(100, 't0');
  probe.processes.set(200, 't0');
  const reopened: KeptEndpoint[] = [];
  const released: string[] = [];
  /** What the credential server would answer on each socket now: its session and hosts. */
  const answering = new Map<string, { sessionId: string; hosts: readonly string[]; path: string }>();
  const subject = new KeptEndpoints({
    records,
    probe,
    reopen: async (endpoint) => {
      reopened.push(endpoint);
      await hold;
      const dir = 'dir' in endpoint ? endpoint.dir : '';
      if (dir === 'ffffffffffffffff') throw new Error('cannot');
      const served: ServedAgent = {
        kind: 'mount',
        mountSource: `/agents/${dir}`,
        endpointPath: `/agents/${dir}/agent.sock`,
        relabel: undefined,
        flags: [],
        warnings: [],
        lease: { bridgeId: 'relay_x', release: () => void released.push(dir) },
      };
      return served;
    },
    live: () => live,
    answer: (endpointPath, sessionId, credentials) => {
      const entry = { sessionId, hosts: credentials.hosts, path: credentials.path };
      answering.set(endpointPath, entry);
      return () => {
        if (answering.get(endpointPath) === entry) answering.delete(endpointPath);
      };
    },
    ttlMs: 30_000,
    timers: time.timers,
    logger,
  });
  const file = path.join(dir, 'endpoints.json');
  return { subject, time, probe, reopened, released, answering, file, read: () => JSON.parse(readFileSync(file, 'utf8')) as { sessions: KeptSession[] } };
}

describe('KeptEndpoints: a running container\'s sockets outlive a graceful stop, for its client\'s renewal', () => {
  it('serves again only the sessions whose client still runs (pid and start time), each at its recorded path', async () => {
    const { subject, reopened } = await kept([
      session('ses_live000001', 100, [relay('0000000000000001'), relay('0000000000000002', 'extra', '/extra.sock')]),
      session('ses_gone000001', 300, [relay('0000000000000003')]),
      session('ses_reuse00001', 200, [relay('0000000000000004')], 'another start'),
    ]);
    expect(await subject.start()).toHaveLength(1);
    expect(reopened).toEqual([relay('0000000000000001'), relay('0000000000000002', 'extra', '/extra.sock')]);
  });

  it('names the live sessions before their sockets are served again; a renewal waits for them', async () => {
    let served = (): void => undefined;
    const hold = new Promise<void>((resolve) => {
      served = resolve;
    });
    const { subject, reopened } = await kept([session('ses_live000001', 100, [relay('0000000000000001')]), session('ses_gone000001', 300, [relay('0000000000000003')])], [], hold);
    const started = subject.start();
    // What a daemon's first acquires wait for: the sessions (their directories stay), not a socket served again.
    expect((await subject.found()).map((entry) => entry.sessionId)).toEqual(['ses_live000001']);
    expect(reopened).toEqual([relay('0000000000000001')]);
    const taking = subject.take('ses_live000001', 100, null, '/agent.sock');
    served();
    expect((await taking)?.mountSource).toBe('/agents/0000000000000001');
    expect(await started).toHaveLength(1);
  });

  it('a renewal by the same client takes each socket over once, by name and upstream; anyone else gets none', async () => {
    const { subject, released } = await kept([session('ses_live000001', 100, [relay('0000000000000001'), relay('0000000000000002', 'extra', '/extra.sock')])]);
    await subject.start();
    expect(await subject.take('ses_live000001', 999, null, '/agent.sock')).toBeNull();
    expect(await subject.take('ses_live000001', 100, null, '/another-agent.sock')).toBeNull();
    expect(await subject.take('ses_other00001', 100, null, '/agent.sock')).toBeNull();
    expect((await subject.take('ses_live000001', 100, null, '/agent.sock'))?.mountSource).toBe('/agents/0000000000000001');
    expect(await subject.take('ses_live000001', 100, null, '/agent.sock')).toBeNull();
    expect((await subject.take('ses_live000001', 100, 'extra', '/extra.sock'))?.mountSource).toBe('/agents/0000000000000002');
    expect(released).toEqual([]);
  });

  it('closes what no renewal took within a lease, and records that it did', async () => {
    const { subject, time, released, read } = await kept([
      session('ses_live000001', 100, [relay('0000000000000001')]),
      session('ses_live000002', 200, [relay('0000000000000002'), relay('ffffffffffffffff', 'broken')]),
    ]);
    await subject.start();
    await subject.take('ses_live000001', 100, null, '/agent.sock');
    await time.advance(29_000);
    expect(released).toEqual([]);
    await time.advance(1_000);
    expect(released).toEqual(['0000000000000002']);
    await time.advance(1_000);
    // The write itself is real I/O, done a moment after its timer.
    await vi.waitFor(() => {
      expect(read().sessions).toEqual([]);
    });
  });

  it('the sweep closes at once the sockets of a client that ended before renewing, and records it; a live client\'s wait goes on', async () => {
    const { subject, time, probe, released, read } = await kept([
      session('ses_live000001', 100, [relay('0000000000000001')]),
      session('ses_live000002', 200, [relay('0000000000000002')]),
    ]);
    await subject.start();
    await subject.sweep();
    expect(released).toEqual([]);
    probe.processes.delete(200);
    await subject.sweep();
    expect(released).toEqual(['0000000000000002']);
    await time.advance(1_000);
    await vi.waitFor(() => {
      expect(read().sessions.map((entry) => entry.sessionId)).toEqual(['ses_live000001']);
    });
    expect(await subject.take('ses_live000001', 100, null, '/agent.sock')).not.toBeNull();
  });

  it('a recorded credential socket answers its session\'s recorded hosts, as that session, from the moment it is served until the renewal takes it', async () => {
    const { subject, answering } = await kept([
      session('ses_live000001', 100, [relay('0000000000000001'), credential('0000000000000002')]),
      // An earlier release's record names no hosts: its socket is served and answers nothing.
      session('ses_live000002', 200, [{ kind: 'relay', name: 'git-credential', upstream: '/rt/git-credential.sock', dir: '0000000000000003' }]),
      session('ses_gone000001', 300, [credential('0000000000000004')]),
    ]);
    await subject.start();
    expect([...answering.entries()]).toEqual([['/agents/0000000000000002/agent.sock', { sessionId: 'ses_live000001', ...CREDENTIALS }]]);
    // Another socket of the session taken over leaves it answering; its own take ends that (the renewed session registers).
    await subject.take('ses_live000001', 100, null, '/agent.sock');
    expect(answering.size).toBe(1);
    expect(await subject.take('ses_live000001', 999, 'git-credential', '/rt/git-credential.sock')).toBeNull();
    expect(answering.size).toBe(1);
    expect((await subject.take('ses_live000001', 100, 'git-credential', '/rt/git-credential.sock'))?.endpointPath).toBe('/agents/0000000000000002/agent.sock');
    expect(answering.size).toBe(0);
  });

  it('a credential socket stops answering at once when the sweep finds its client gone, at the end of the lease, and as the daemon stops', async () => {
    const { subject, time, probe, answering, released } = await kept([
      session('ses_live000001', 100, [credential('0000000000000001')]),
      session('ses_live000002', 200, [credential('0000000000000002')]),
    ]);
    await subject.start();
    expect(answering.size).toBe(2);
    probe.processes.delete(200);
    await subject.sweep();
    expect([...answering.values()].map((entry) => entry.sessionId)).toEqual(['ses_live000001']);
    expect(released).toEqual(['0000000000000002']);
    await time.advance(30_000);
    expect(answering.size).toBe(0);
    expect(released).toEqual(['0000000000000002', '0000000000000001']);
    const again = await kept([session('ses_live000001', 100, [credential('0000000000000001')])]);
    await again.subject.start();
    expect(again.answering.size).toBe(1);
    again.subject.release();
    expect(again.answering.size).toBe(0);
  });

  it('a record cannot widen what a credential socket answers: hosts not in an acquire\'s form, or more of them, refuse the session', async () => {
    const dir = stateDir();
    const records = new EndpointRecords(dir, logger);
    const widened = (hosts: string[]) => session('ses_live000001', 100, [credential('0000000000000001', { ...CREDENTIALS, hosts })]);
    const bad = [['*.example.com'], ['GitHub.com'], ['github.com:443'], ['https://github.com'], ['github.com', 'github.com'], [], Array.from({ length: 17 }, (_, index) => `h${String(index)}.example.com`)];
    writeFileSync(path.join(dir, 'endpoints.json'), JSON.stringify({ version: 1, sessions: [...bad.map(widened), session('ses_live000002', 100, [credential('0000000000000002')])] }));
    expect((await records.load()).map((entry) => entry.sessionId)).toEqual(['ses_live000002']);
  });

  it('writes a burst of changes once, a moment later; freezing writes at once and nothing after', async () => {
    const live = [session('ses_new0000001', 100, [relay('00000000000000aa')])];
    const { subject, time, read, file } = await kept([session('ses_live000001', 100, [relay('0000000000000001')])], live);
    await subject.start();
    subject.changed();
    subject.changed();
    await time.advance(999);
    expect(read().sessions.map((s) => s.sessionId)).toEqual(['ses_live000001']);
    await time.advance(1);
    // The live session, and the one still waiting for its renewal.
    await vi.waitFor(() => {
      expect(read().sessions.map((s) => s.sessionId)).toEqual(['ses_new0000001', 'ses_live000001']);
    });
    await subject.freeze();
    live.length = 0;
    subject.changed();
    await time.advance(5_000);
    expect(read().sessions.map((s) => s.sessionId)).toEqual(['ses_new0000001', 'ses_live000001']);
    expect(readFileSync(file, 'utf8')).toContain('"version":1');
  });

  it('a record that is not in sandboxd\'s shape serves nothing; a FIFO in its place makes no start hang', async () => {
    const dir = stateDir();
    const file = path.join(dir, 'endpoints.json');
    writeFileSync(file, JSON.stringify({ version: 1, sessions: [session('ses_live000001', 100, [{ kind: 'relay', name: null, upstream: '/a', dir: '../../etc' } as unknown as KeptEndpoint])] }));
    expect(await new EndpointRecords(dir, logger).load()).toEqual([]);
    rmSync(file);
    execFileSync('mkfifo', [file]);
    expect(await new EndpointRecords(dir, logger).load()).toEqual([]);
  });
});
