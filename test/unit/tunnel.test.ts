import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import pino from 'pino';
import { createLogger } from '../../daemon/os/logger.js';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { REMOTE_STUB } from '../../daemon/podman/ssh-command.js';
import { Tunnel, type TunnelRecord } from '../../daemon/bridges/tunnels/tunnel.js';
import { reapOrphans } from '../../daemon/bridges/tunnels/tunnel-store.js';

/** Stands in for the `ssh -R` child: the test decides when it prints ready or exits. */
class FakeSsh extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly stdin = new PassThrough();
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  stdinText = '';
  /** The VM's sshd is down: the login fails whatever it is sent. */
  refused = false;
  constructor(readonly pid: number, readonly args: string[]) {
    super();
    this.stdin.on('data', (chunk: Buffer) => (this.stdinText += chunk.toString()));
    this.stdin.on('finish', () => {
      this.exit(this.refused ? 255 : 0);
    });
  }
  refuse(): void {
    this.refused = true;
    this.stderr.write('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
  }
  /** As the remote script does: the SELinux line first, then ready. */
  ready(selinux = 'none'): void {
    this.stdout.write(`sandboxd-selinux ${selinux}\nsandboxd-ready\n`);
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

const DIR_NAME = '0123456789abcdef0123456789abcdef';

/** The VM-side bind path a generation's `ssh -R` asked for. */
const bindOf = (child: FakeSsh | undefined) => (child?.args[child.args.indexOf('-R') + 1] ?? '').split(':')[0] ?? '';

function setup(rediscover?: () => Promise<PodmanConnection>, replaceRoot?: (taken: string) => Promise<string>) {
  const children: FakeSsh[] = [];
  const records: (TunnelRecord | null)[] = [];
  const logs: { msg: string; taken?: string; root?: string; tunnelId?: string }[] = [];
  /** Set while the VM's sshd is down: every login spawned meanwhile is refused. */
  const vm = { down: false };
  const uri = 'ssh://core@127.0.0.1:2222/run/podman.sock';
  const tunnel = new Tunnel({
    ...(rediscover === undefined ? {} : { rediscover }),
    ...(replaceRoot === undefined ? {} : { replaceRoot }),
    id: 'tun_abcdef123456',
    dirName: DIR_NAME,
    connection: { name: 'machine', uri, identity: '/k', isDefault: true, isMachine: false, target: parseSshUri(uri, 'machine') },
    agentSocket: '/agent.sock',
    vmRoot: '/tmp/sandboxd-x',
    knownHostsPath: '/kh',
    logger: pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) }),
    spawnSsh: (args) => {
      const child = new FakeSsh(1000 + children.length, args);
      if (vm.down) child.refuse();
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
  return { tunnel, children, records, ready, logs, vm };
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
    await ready('1');
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', pid: 1000, restarts: 0, socketPath: `/tmp/sandboxd-x/${DIR_NAME}/agent.sock` });
    expect(tunnel.selinuxMode).toBe('enforcing');
    expect(records).toEqual([{ id: 'tun_abcdef123456', pid: 1000, vmDir: `/tmp/sandboxd-x/${DIR_NAME}`, connection: 'machine', agentSocket: '/agent.sock' }]);
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

  it('has the next generation remove the bind socket of one that died before publishing it', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    // Generation 2 dies between sshd's bind and the script's move (ssh or sshd killed).
    children[1]?.fail('Connection reset by peer\n');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(children).toHaveLength(3);
    expect(children[2]?.stdinText).toContain(`rm -f '${bindOf(children[1])}'`);
    expect(children[2]?.stdinText).not.toContain(bindOf(children[0]));
    expect(tunnel.describe(1).state).toBe('restarting');
    // Generation 3 never reaches the VM (sshd still down): its script never ran, so generation 4
    // must still remove generation 2's socket, and generation 3's own; once 4 publishes, none.
    children[2]?.fail('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
    await vi.advanceTimersByTimeAsync(2_000);
    expect(children).toHaveLength(4);
    expect(children[3]?.stdinText).toContain(`rm -f '${bindOf(children[1])}' '${bindOf(children[2])}'`);
    const back = tunnel.whenReady();
    children[3]?.ready();
    await back;
    children[3]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    expect(children[4]?.stdinText).not.toContain(bindOf(children[1]));
    expect(children[4]?.stdinText).not.toContain(bindOf(children[2]));
  });

  it('a tunnel halted while its last generation died unpublished removes that bind socket with one more login', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    children[1]?.fail('Connection reset by peer\n');
    await vi.advanceTimersByTimeAsync(0);
    await tunnel.halt();
    const cleanup = children.at(-1);
    expect(cleanup?.args).not.toContain('-R');
    expect(cleanup?.args.at(-1)).toBe(REMOTE_STUB);
    expect(cleanup?.stdinText).toBe(`rm -f '${bindOf(children[1])}'; exit 0\n`);
    expect(cleanup?.exitCode).toBe(0);
  });

  /** sshd is killed between generation 2's bind and its script's move, and is still down at the halt. */
  async function haltedWhileVmDown() {
    const lab = setup();
    await lab.ready();
    lab.children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    lab.children[1]?.fail('Connection to 127.0.0.1 closed by remote host.\n');
    await vi.advanceTimersByTimeAsync(0);
    lab.vm.down = true;
    await lab.tunnel.halt();
    return lab;
  }

  it('a tunnel halted while the VM is down logs in again with backoff until its leftover bind socket is removed', async () => {
    const { children, vm } = await haltedWhileVmDown();
    const script = `rm -f '${bindOf(children[1])}'; exit 0\n`;
    const logins = () => children.filter((child) => child.stdinText === script).map((child) => child.exitCode);
    expect(logins()).toEqual([255]);
    await vi.advanceTimersByTimeAsync(500);
    expect(logins()).toEqual([255, 255]);
    vm.down = false;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(logins()).toEqual([255, 255, 0]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(logins()).toEqual([255, 255, 0]);
  });

  it('a tunnel halted while the VM stays down gives its leftover up after a bounded number of logins, and says so', async () => {
    const { children, logs } = await haltedWhileVmDown();
    // 0.5 s, 1 s, then 2 s apart: the tenth login is 15.5 s after the first, and the last.
    await vi.advanceTimersByTimeAsync(15_499);
    expect(children.slice(2)).toHaveLength(9);
    await vi.advanceTimersByTimeAsync(1);
    await vi.advanceTimersByTimeAsync(600_000);
    expect(children.slice(2).map((child) => child.exitCode)).toEqual(Array<number>(10).fill(255));
    expect(logs.map((line) => line.msg)).toContain('10 logins to the VM failed; bind sockets of generations that died stay beside the tunnel root');
    expect(logs.map((line) => line.msg)).not.toContain('removed bind sockets left by generations that died');
  });

  it('a tunnel halted with nothing left behind makes no extra login', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    await tunnel.halt();
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

  it('a restart whose new ssh fails stops the old one too, and retries as after any death', async () => {
    const { tunnel, children, records, ready } = setup();
    await ready();
    const restarting = tunnel.restart();
    restarting.catch(() => undefined);
    expect(children).toHaveLength(2);
    children[1]?.fail('Connection reset by peer\n');
    await vi.advanceTimersByTimeAsync(0);
    await expect(restarting).rejects.toMatchObject({ code: 'TUNNEL_UNREACHABLE', message: expect.stringContaining('Connection reset by peer') as string });
    // Closed without the halt word: its script removes its own socket and leaves the directory.
    expect(children[0]?.exitCode).toBe(0);
    expect(children[0]?.stdinText).not.toMatch(/\nhalt\n$/);
    // The restart, then the failed generation's retry.
    expect(tunnel.describe(1)).toMatchObject({ state: 'restarting', pid: null, restarts: 2 });
    await vi.advanceTimersByTimeAsync(500);
    expect(children).toHaveLength(3);
    children[2]?.ready();
    await tunnel.whenReady();
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', pid: 1002, restarts: 2, lastError: null });
    expect(records.at(-1)).toMatchObject({ pid: 1002 });
    await tunnel.halt();
  });

  it('a halt during a restart stops the old ssh and the new one', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    const restarting = tunnel.restart();
    restarting.catch(() => undefined);
    await tunnel.halt();
    await expect(restarting).rejects.toMatchObject({ code: 'TUNNEL_FAILED', message: 'tunnel tun_abcdef123456: the tunnel was stopped' });
    expect(children.slice(0, 2).map((child) => [child.exitCode, child.stdinText.endsWith('\nhalt\n')])).toEqual([[0, true], [0, true]]);
    expect(tunnel.describe(0).state).toBe('stopped');
  });

  it('believes the ready line once: a VM that prints it again changes nothing', async () => {
    const { tunnel, children, records, ready } = setup();
    await ready();
    children[0]?.ready();
    children[0]?.stdout.write('sandboxd-root-taken\n');
    await vi.advanceTimersByTimeAsync(0);
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', restarts: 0 });
    expect(records).toHaveLength(1);
    children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    // A plain death: retried under the same root, not a root another user holds.
    expect(children).toHaveLength(2);
    expect(bindOf(children[1])).toMatch(/^\/tmp\/sandboxd-x\./);
    await tunnel.halt();
  });

  it('halt tells the remote side to remove the directory and stops the child', async () => {
    const { tunnel, children, records, ready } = setup();
    await ready();
    await tunnel.halt();
    expect(children[0]?.stdinText).toMatch(/\nhalt\n$/);
    expect(children[0]?.exitCode).toBe(0);
    expect(tunnel.describe(0).state).toBe('stopped');
    expect(records.at(-1)).toBeNull();
    await expect(tunnel.whenReady()).rejects.toMatchObject({ code: 'TUNNEL_FAILED' });
  });
});

describe('Tunnel and the VM (fake ssh)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sends its script on stdin: the VM dir is on no argv, the remote command is the fixed stub', async () => {
    const { children, ready } = setup();
    await ready();
    const args = children[0]?.args ?? [];
    expect(args.at(-1)).toBe(REMOTE_STUB);
    expect(args.join(' ')).not.toContain(DIR_NAME);
    const script = children[0]?.stdinText.split('\n')[0] ?? '';
    expect(script).toContain(`n='${DIR_NAME}'`);
    // The bind path beside the root is fresh randomness, unrelated to the secret dir name.
    expect(args[args.indexOf('-R') + 1]).toMatch(/^\/tmp\/sandboxd-x\.[0-9a-f]{32}\.sock:\/agent\.sock$/);
  });

  it('asks the VM over its own connection, one line per path, and matches the answers by id', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    const child = children[0];
    const asked = tunnel.ask(['/Users/me/p', '/Volumes/x']);
    await vi.waitFor(() => {
      expect(child?.stdinText).toContain('s 2 /Volumes/x\n');
    });
    expect(child?.stdinText).toContain('s 1 /Users/me/p\n');
    child?.stdout.write('sandboxd-seen 2 -\nsandboxd-seen 1 d\n');
    expect(await asked).toEqual(new Map([['/Users/me/p', 'd'], ['/Volumes/x', '-']]));
  });

  it('fails open questions when its ssh dies, and refuses new ones until it is ready again', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    const asked = tunnel.ask(['/p']);
    asked.catch(() => undefined);
    children[0]?.exit(255);
    await expect(asked).rejects.toMatchObject({ code: 'TUNNEL_FAILED', message: expect.stringContaining('ssh connection closed') as string });
    await expect(tunnel.ask(['/p'])).rejects.toMatchObject({ code: 'TUNNEL_FAILED', message: expect.stringContaining('not ready') as string });
    await tunnel.halt();
  });

  it('an unreachable machine is re-discovered before the next attempt, which follows it to its new port', async () => {
    vi.useFakeTimers();
    const moved = 'ssh://core@127.0.0.1:3333/run/podman.sock';
    const rediscover = vi.fn(() => Promise.resolve({ name: 'machine', uri: moved, identity: '/k', isDefault: true, isMachine: false, target: parseSshUri(moved, 'machine') }));
    const { tunnel, children, ready } = setup(rediscover);
    await ready();
    children[0]?.fail('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
    await vi.advanceTimersByTimeAsync(500);
    expect(rediscover).toHaveBeenCalledTimes(1);
    expect(children).toHaveLength(2);
    const args = children[1]?.args ?? [];
    expect(args[args.indexOf('-p') + 1]).toBe('3333');
    children[1]?.ready();
    await tunnel.whenReady();
    expect(tunnel.currentConnection.uri).toBe(moved);
    await tunnel.halt();
  });

  it('an ssh that dies for another reason is retried without asking podman again', async () => {
    vi.useFakeTimers();
    const rediscover = vi.fn(() => Promise.reject(new Error('not expected')));
    const { tunnel, children, ready } = setup(rediscover);
    await ready();
    children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    expect(children).toHaveLength(2);
    expect(rediscover).not.toHaveBeenCalled();
    await tunnel.halt();
  });

  it('a re-discovery that fails retries the old address', async () => {
    vi.useFakeTimers();
    const rediscover = vi.fn(() => Promise.reject(new Error('podman is gone')));
    const { tunnel, children, ready } = setup(rediscover);
    await ready();
    children[0]?.fail('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
    await vi.advanceTimersByTimeAsync(500);
    expect(rediscover).toHaveBeenCalledTimes(1);
    const args = children[1]?.args ?? [];
    expect(args[args.indexOf('-p') + 1]).toBe('2222');
    await tunnel.halt();
  });

  it('says in the log when the VM could not lock the tunnel dir against tmpfiles, and runs anyway', async () => {
    const { tunnel, children, logs } = setup();
    tunnel.start();
    const ready = tunnel.whenReady();
    children[0]?.stdout.write('sandboxd-selinux none\nsandboxd-unlocked\nsandboxd-ready\n');
    await ready;
    expect(logs).toContainEqual(expect.objectContaining({ msg: expect.stringContaining('cannot lock the tunnel directory in the VM') as string, tunnelId: 'tun_abcdef123456' }));
    await tunnel.halt();
  });

  it('a refused bind in a VM that enforces SELinux names SELinux as the likely cause', async () => {
    const { tunnel, children } = setup();
    tunnel.start();
    const pending = tunnel.whenReady();
    pending.catch(() => undefined);
    children[0]?.stdout.write('sandboxd-selinux 1\n');
    await vi.waitFor(() => {
      expect(tunnel.selinuxMode).toBe('enforcing');
    });
    children[0]?.fail('Error: remote port forwarding failed for listen path /tmp/sandboxd-x.ab.sock\n');
    await expect(pending).rejects.toMatchObject({
      code: 'TUNNEL_BIND_REFUSED',
      message: 'sshd behind connection machine refused to bind the agent socket: Error: remote port forwarding failed for listen path /tmp/sandboxd-x.ab.sock; SELinux enforces in that VM and is the likely cause (it can deny sshd-session the bind)',
    });
    expect(tunnel.describe(0).lastError).toContain('SELinux enforces');
  });
});

describe('Tunnel and a root another VM user holds (fake ssh)', () => {
  /** As the remote script does when the root is not the remote user's own: says so, and exits. */
  const taken = (child: FakeSsh | undefined) => {
    child?.stdout.write('sandboxd-selinux none\nsandboxd-root-taken\n');
    setImmediate(() => child?.exit(6));
  };
  const rootOf = (child: FakeSsh | undefined) => /^r='([^']*)'/.exec(child?.stdinText ?? '')?.[1];

  it('leaves it alone, chooses a new root at once, is ready there and says so in the log', async () => {
    const replaced: string[] = [];
    const replaceRoot = (old: string) => {
      replaced.push(old);
      return Promise.resolve('/tmp/sandboxd-0123456789abcdef');
    };
    const { tunnel, children, records, logs } = setup(undefined, replaceRoot);
    tunnel.start();
    const ready = tunnel.whenReady();
    taken(children[0]);
    await vi.waitFor(() => {
      expect(children).toHaveLength(2);
    });
    expect(replaced).toEqual(['/tmp/sandboxd-x']);
    expect(rootOf(children[1])).toBe('/tmp/sandboxd-0123456789abcdef');
    expect(bindOf(children[1])).toMatch(/^\/tmp\/sandboxd-0123456789abcdef\.[0-9a-f]{32}\.sock$/);
    // The first generation's bind socket sits beside the old root: the next script removes it.
    expect(children[1]?.stdinText).toContain(`rm -f '${bindOf(children[0])}'`);
    children[1]?.ready();
    await ready;
    expect(tunnel.vmDir).toBe(`/tmp/sandboxd-0123456789abcdef/${DIR_NAME}`);
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', socketPath: `/tmp/sandboxd-0123456789abcdef/${DIR_NAME}/agent.sock`, lastError: null });
    expect(records.at(-1)).toMatchObject({ vmDir: `/tmp/sandboxd-0123456789abcdef/${DIR_NAME}` });
    expect(logs).toContainEqual(
      expect.objectContaining({
        msg: 'the tunnel root in the VM belongs to someone else; left it alone and chose a new one',
        taken: '/tmp/sandboxd-x',
        root: '/tmp/sandboxd-0123456789abcdef',
        tunnelId: 'tun_abcdef123456',
      }),
    );
    await tunnel.halt();
  });

  it('fails with TUNNEL_FAILED once three new names in a row were taken too', async () => {
    let next = 0;
    const replaceRoot = () => Promise.resolve(`/tmp/sandboxd-000000000000000${String((next += 1))}`);
    const { tunnel, children } = setup(undefined, replaceRoot);
    tunnel.start();
    const ready = tunnel.whenReady();
    ready.catch(() => undefined);
    for (let attempt = 0; attempt < 4; attempt += 1) {
      await vi.waitFor(() => {
        expect(children).toHaveLength(attempt + 1);
      });
      taken(children[attempt]);
    }
    await expect(ready).rejects.toMatchObject({
      code: 'TUNNEL_FAILED',
      message: 'tunnel tun_abcdef123456: the tunnel root /tmp/sandboxd-0000000000000003 in the VM is held by another user, as were the 3 names chosen before it (is /tmp in the VM usable?)',
    });
    expect(children).toHaveLength(4);
    expect(tunnel.describe(0).state).toBe('failed');
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
