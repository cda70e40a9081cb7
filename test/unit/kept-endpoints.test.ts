import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ServedAgent } from '../../daemon/bridges/bridge.js';
import { EndpointRecords, type KeptEndpoint, type KeptSession } from '../../daemon/bridges/endpoint-records.js';
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
        relabel: undefined,
        flags: [],
        warnings: [],
        lease: { bridgeId: 'relay_x', release: () => void released.push(dir) },
      };
      return served;
    },
    live: () => live,
    ttlMs: 30_000,
    timers: time.timers,
    logger,
  });
  const file = path.join(dir, 'endpoints.json');
  return { subject, time, probe, reopened, released, file, read: () => JSON.parse(readFileSync(file, 'utf8')) as { sessions: KeptSession[] } };
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
