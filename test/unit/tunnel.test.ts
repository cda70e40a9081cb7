import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../daemon/logger.js';
import { parseSshUri } from '../../daemon/podman/connections.js';
import { Tunnel, type TunnelRecord } from '../../daemon/tunnels/tunnel.js';
import { reapOrphans } from '../../daemon/tunnels/tunnel-store.js';

/** Stands in for the `ssh -R` child: the test decides when it prints ready or exits. */
class FakeSsh extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly stdin = new PassThrough();
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  stdinText = '';
  constructor(readonly pid: number, readonly args: string[]) {
    super();
    this.stdin.on('data', (chunk: Buffer) => (this.stdinText += chunk.toString()));
    this.stdin.on('finish', () => {
      this.exit(0);
    });
  }
  ready(selinux = 'none'): void {
    this.stdout.write(`sandboxd-ready ${selinux}\n`);
  }
  fail(stderr: string, code = 255): void {
    this.stderr.write(stderr);
    setImmediate(() => {
      this.exit(code);
    });
  }
  exit(code: number): void {
    if (this.exitCode !== null) return;
    this.exitCode = code;
    this.emit('close', code, null);
  }
  kill(): boolean {
    this.exit(143);
    return true;
  }
}

function setup() {
  const children: FakeSsh[] = [];
  const records: (TunnelRecord | null)[] = [];
  const uri = 'ssh://core@127.0.0.1:2222/run/podman.sock';
  const tunnel = new Tunnel({
    id: 'tun_abcdef123456',
    hash: 'abcdef123456',
    connection: { name: 'machine', uri, identity: '/k', isDefault: true, target: parseSshUri(uri, 'machine') },
    agentSocket: '/agent.sock',
    vmRoot: '/tmp/sandboxd-x',
    knownHostsPath: '/kh',
    logger: createLogger({ kind: 'silent' }),
    spawnSsh: (args) => {
      const child = new FakeSsh(1000 + children.length, args);
      children.push(child);
      return child as unknown as ChildProcess;
    },
    onChild: (record) => records.push(record),
    readyTimeoutMs: 15_000,
  });
  /** Starts the tunnel and lets its first ssh print the ready line. */
  const ready = async (selinux?: string) => {
    tunnel.start();
    const pending = tunnel.whenReady();
    children[0]?.ready(selinux);
    await pending;
  };
  return { tunnel, children, records, ready };
}

describe('Tunnel state machine (fake ssh, fake time)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('is ready on the ready line, records its pid, and reports the SELinux mode', async () => {
    const { tunnel, records, ready } = setup();
    await ready('Enforcing');
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', pid: 1000, restarts: 0, socketPath: '/tmp/sandboxd-x/abcdef123456/agent.sock' });
    expect(tunnel.selinuxMode).toBe('Enforcing');
    expect(records).toEqual([{ id: 'tun_abcdef123456', pid: 1000, vmDir: '/tmp/sandboxd-x/abcdef123456', connection: 'machine', agentSocket: '/agent.sock' }]);
  });

  it('fails a cold start with ssh\'s classified error and does not retry', async () => {
    const { tunnel, children } = setup();
    tunnel.start();
    const ready = tunnel.whenReady();
    ready.catch(() => undefined);
    children[0]?.fail('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
    await vi.advanceTimersByTimeAsync(0);
    await expect(ready).rejects.toMatchObject({ code: 'TUNNEL_UNREACHABLE' });
    expect(tunnel.describe(0).state).toBe('failed');
    await vi.advanceTimersByTimeAsync(60_000);
    expect(children).toHaveLength(1);
  });

  it('re-creates a dead ssh with capped exponential backoff, a fresh socket name each time', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    children[0]?.exit(255);
    expect(tunnel.describe(1).state).toBe('restarting');
    await vi.advanceTimersByTimeAsync(499);
    expect(children).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(children).toHaveLength(2);
    children[1]?.fail('Connection refused\n');
    await vi.advanceTimersByTimeAsync(0);
    await vi.advanceTimersByTimeAsync(999);
    expect(children).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(children).toHaveLength(3);
    children[2]?.ready();
    await tunnel.whenReady();
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', restarts: 2, lastError: null, pid: 1002 });
    const bindPaths = children.map((child) => child.args[child.args.indexOf('-R') + 1]);
    expect(new Set(bindPaths).size).toBe(3);
  });

  it('a waiting session cuts the backoff short, and gives up with TUNNEL_UNREACHABLE after the bound', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    children[0]?.exit(255);
    const waiting = tunnel.whenReady();
    waiting.catch(() => undefined);
    expect(children).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(15_000);
    await expect(waiting).rejects.toMatchObject({ code: 'TUNNEL_UNREACHABLE', message: expect.stringContaining('was not ready within 15000 ms') as string });
  });

  it('halt tells the remote side to remove the directory and stops the child', async () => {
    const { tunnel, children, records, ready } = setup();
    await ready();
    await tunnel.halt();
    expect(children[0]?.stdinText).toBe('halt\n');
    expect(children[0]?.exitCode).toBe(0);
    expect(tunnel.describe(0).state).toBe('stopped');
    expect(records.at(-1)).toBeNull();
    await expect(tunnel.whenReady()).rejects.toMatchObject({ code: 'TUNNEL_FAILED' });
  });
});

describe('reapOrphans', () => {
  const vmDir = '/tmp/sandboxd-0123456789/abcdef012345';
  const argv = (pid: number): string[] => ['ssh', '-T', '-R', '/tmp/sandboxd-0123456789.abcdef012345.a-1.sock:/a', '--', 'core@h', `d=${vmDir} # ${String(pid)}`];
  const record = (pid: number): TunnelRecord => ({ id: `tun_${String(pid)}`, pid, vmDir, connection: 'm', agentSocket: '/a', argv: argv(pid) });

  it('kills only pids that still run exactly the recorded ssh argv', async () => {
    // Stands in for the process table (argv joined by spaces, as /proc reads): 10 is our orphan,
    // 11 a reused pid, 12 gone, 13 another ssh whose command line merely contains ours.
    const table = new Map<number, string>([
      [10, `${argv(10).join(' ')} `],
      [11, '/usr/bin/vim notes.txt'],
      [13, `ssh -v ${argv(13).join(' ')}`],
    ]);
    const signals: [number, string][] = [];
    const reaped = await reapOrphans(
      [record(10), record(11), record(12), record(13)],
      {
        commandLine: (pid) => Promise.resolve(table.get(pid) ?? null),
        kill: (pid, signal) => {
          signals.push([pid, signal]);
          table.delete(pid);
        },
        sleep: () => Promise.resolve(),
      },
      createLogger({ kind: 'silent' }),
    );
    expect(reaped).toBe(1);
    expect(signals).toEqual([[10, 'SIGTERM']]);
    expect(table.has(11)).toBe(true);
    expect(table.has(13)).toBe(true);
  });
});
