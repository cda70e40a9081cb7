import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import pino from 'pino';
import { UpstreamGate } from '../../daemon/bridges/bounds.js';
import { createLogger } from '../../daemon/os/logger.js';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { REMOTE_STUB } from '../../daemon/podman/ssh-command.js';
import { MuxRefusal, type MuxClient } from '../../daemon/podman/ssh-mux.js';
import { Tunnel, type TunnelRecord } from '../../daemon/bridges/tunnels/tunnel.js';
import { reapOrphans } from '../../daemon/bridges/tunnels/tunnel-store.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();

/**
 * Stands in for the ssh ControlMaster child: the test decides when it prints ready or exits; once
 * ready it answers the slot commands its script would (`m`, `p`, `r`: done; `V`: the names in
 * `replaced`), and leaves visibility queries to the test.
 */
class FakeSsh extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly stdin = new PassThrough();
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  stdinText = '';
  /** The VM's sshd is down: the login fails whatever it is sent. */
  refused = false;
  /** Session directories `V` reports as replaced. */
  replaced: string[] = [];
  /** Slot commands of these verbs are not answered (the VM is slow to) until `answerWithheld`. */
  readonly withhold = new Set<string>();
  private withheld: string[] = [];
  constructor(readonly pid: number, readonly args: string[]) {
    super();
    this.stdin.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      this.stdinText += text;
      for (const line of text.split('\n')) this.answer(line);
    });
    this.stdin.on('finish', () => {
      this.exit(this.refused ? 255 : 0);
    });
  }
  /** Slot commands and their answers, in order. */
  commands(): string[] {
    return this.stdinText.split('\n').filter((line) => /^[mprV] /.test(line));
  }
  answerWithheld(): void {
    const lines = this.withheld;
    this.withheld = [];
    for (const line of lines) this.answer(line, true);
  }
  private answer(line: string, now = false): void {
    const [verb, id] = line.split(' ');
    if (!now && this.withhold.has(verb ?? '')) {
      this.withheld.push(line);
      return;
    }
    if (verb === 'm' || verb === 'p' || verb === 'r') this.stdout.write(`sandboxd-seen ${id ?? ''} d\n`);
    if (verb === 'V') this.stdout.write(`sandboxd-slots ${id ?? ''}${this.replaced.map((name) => ` ${name}`).join('')}\n`);
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

/** Stands in for a generation's control connection: what it was asked, by control path. */
interface FakeMux {
  calls: string[];
  /** Every OPEN_FWD is refused with this reason while it is set. */
  refuse: string | null;
  /** Every CLOSE_FWD fails while it is set (the control connection broke). */
  failClose?: boolean;
}

const DIR_NAME = '0123456789abcdef0123456789abcdef';
const TUNNEL_DIR = `/tmp/sandboxd-x/${DIR_NAME}`;

/** A mux client that records each request as `<control path> open|close <vm socket> <host socket>`. */
function fakeMux(mux: FakeMux, controlPath: string): MuxClient {
  const request = (verb: string) => (listen: string, connect: string): Promise<void> => {
    mux.calls.push(`${path.basename(controlPath)} ${verb} ${listen} ${path.basename(connect)}`);
    const refusal = verb === 'open' ? mux.refuse : null;
    if (refusal !== null) return Promise.reject(new MuxRefusal(refusal));
    if (verb === 'close' && mux.failClose === true) return Promise.reject(new Error('the ssh control connection closed'));
    return Promise.resolve();
  };
  return { closed: false, openRemoteForward: request('open'), closeRemoteForward: request('close'), close: () => undefined } as unknown as MuxClient;
}

function setup(options: { rediscover?: () => Promise<PodmanConnection>; replaceRoot?: (taken: string) => Promise<string>; keeping?: boolean; withhold?: string[] } = {}) {
  const children: FakeSsh[] = [];
  const records: (TunnelRecord | null)[] = [];
  const logs: { msg: string; taken?: string; root?: string; tunnelId?: string }[] = [];
  const mux: FakeMux = { calls: [], refuse: null };
  const hostDir = mkdtempSync('/tmp/sbx-tun-');
  cleanup.add(() => {
    rmSync(hostDir, { recursive: true, force: true });
  });
  /** Set while the VM's sshd is down: every login spawned meanwhile is refused. */
  const vm = { down: false };
  const uri = 'ssh://core@127.0.0.1:2222/run/podman.sock';
  const tunnel = new Tunnel({
    ...(options.rediscover === undefined ? {} : { rediscover: options.rediscover }),
    ...(options.replaceRoot === undefined ? {} : { replaceRoot: options.replaceRoot }),
    id: 'tun_abcdef123456',
    dirName: DIR_NAME,
    connection: { name: 'machine', uri, identity: '/k', isDefault: true, isMachine: false, target: parseSshUri(uri, 'machine') },
    agentSocket: '/agent.sock',
    vmRoot: '/tmp/sandboxd-x',
    hostDir,
    gate: new UpstreamGate(),
    monotonic: () => performance.now(),
    keeping: () => options.keeping ?? false,
    connectMux: (controlPath) => Promise.resolve(fakeMux(mux, controlPath)),
    knownHostsPath: '/kh',
    logger: pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) }),
    spawnSsh: (args) => {
      const child = new FakeSsh(1000 + children.length, args);
      for (const verb of options.withhold ?? []) child.withhold.add(verb);
      if (vm.down) child.refuse();
      children.push(child);
      return child as unknown as ChildProcess;
    },
    onChild: (record) => records.push(record),
    readyTimeoutMs: 15_000,
  });
  cleanup.add(() => tunnel.halt());
  /** Starts the tunnel and lets its first ssh print the ready line. */
  const ready = async (selinux?: string) => {
    tunnel.start();
    const pending = tunnel.whenReady();
    children[0]?.ready(selinux);
    await pending;
  };
  return { tunnel, children, records, ready, logs, vm, mux, hostDir };
}

/** The control path a generation's ssh listens on. */
/** The control socket's name, from `-o ControlPath="<path>"` (quoted as ssh reads an option's value). */
const controlOf = (child: FakeSsh | undefined): string => path.basename((child?.args.find((arg) => arg.startsWith('ControlPath=')) ?? '').slice('ControlPath='.length).replace(/^"(.*)"$/, '$1'));

describe('Tunnel state machine (fake ssh, fake time)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
  });
  afterEach(async () => {
    vi.useRealTimers();
    await cleanup.run();
  });

  it('is ready on the ready line, records its pid, and reports the SELinux mode', async () => {
    const { tunnel, records, ready } = setup();
    await ready('1');
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', pid: 1000, restarts: 0, endpoints: 0, socketPath: `${TUNNEL_DIR}/*/agent.sock` });
    expect(tunnel.selinuxMode).toBe('enforcing');
    expect(records).toEqual([expect.objectContaining({ id: 'tun_abcdef123456', pid: 1000, vmDir: TUNNEL_DIR, connection: 'machine', agentSocket: '/agent.sock' })]);
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

  it('re-creates a dead ssh with capped exponential backoff, each generation on a control path of its own', async () => {
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
    expect(new Set(children.map(controlOf)).size).toBe(3);
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
    // Closed without the halt word: its script leaves the sessions' directories.
    expect(children[0]?.exitCode).toBe(0);
    expect(children[0]?.stdinText).not.toMatch(/\nhalt\n$/);
    expect(tunnel.describe(1)).toMatchObject({ state: 'restarting', pid: null, restarts: 2 });
    await vi.advanceTimersByTimeAsync(500);
    expect(children).toHaveLength(3);
    children[2]?.ready();
    await tunnel.whenReady();
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', pid: 1002, restarts: 2, lastError: null });
    expect(records.at(-1)).toMatchObject({ pid: 1002 });
  });

  it('a halt during a restart stops the old ssh and the new one', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    const restarting = tunnel.restart();
    restarting.catch(() => undefined);
    await tunnel.halt();
    await expect(restarting).rejects.toMatchObject({ code: 'TUNNEL_FAILED', message: 'tunnel tun_abcdef123456: the tunnel was stopped' });
    expect(children.slice(0, 2).map((child) => child.exitCode)).toEqual([0, 0]);
    expect(children[1]?.stdinText.endsWith('\nhalt\n')).toBe(true);
    expect(tunnel.describe(0).state).toBe('stopped');
  });

  it('a session directory asked for before a slow login is ready, whose answer timed out, is asked for again at publish', async () => {
    const { tunnel, children } = setup({ withhold: ['m'] });
    tunnel.start();
    const child = children[0];
    const queued = child?.commands()[0]?.split(' ')[2] ?? '';
    expect(queued).toMatch(/^[0-9a-f]{16}$/);
    await vi.advanceTimersByTimeAsync(6_000);
    child?.withhold.clear();
    const opening = tunnel.open();
    child?.ready();
    const session = await opening;
    expect(path.basename(session.vmDir)).toBe(queued);
    expect(child?.commands().filter((line) => line.startsWith('m ') && line.endsWith(` ${queued}`))).toHaveLength(2);
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
    expect(children[1]?.stdinText).toMatch(/^r='\/tmp\/sandboxd-x'/);
  });

  it('halt tells the remote side to remove the tunnel directory and stops the child; as the daemon stops, it keeps the directories', async () => {
    const { tunnel, children, records, ready } = setup();
    await ready();
    await tunnel.halt();
    expect(children[0]?.stdinText).toMatch(/\nhalt\n$/);
    expect(children[0]?.exitCode).toBe(0);
    expect(tunnel.describe(0).state).toBe('stopped');
    expect(records.at(-1)).toBeNull();
    await expect(tunnel.whenReady()).rejects.toMatchObject({ code: 'TUNNEL_FAILED' });

    const kept = setup({ keeping: true });
    await kept.ready();
    await kept.tunnel.halt();
    expect(kept.children[0]?.exitCode).toBe(0);
    expect(kept.children[0]?.stdinText).not.toContain('\nhalt\n');
  });
});

describe('Tunnel: each session\'s own socket (fake ssh and control socket, real host listeners)', () => {
  afterEach(async () => {
    vi.useRealTimers();
    await cleanup.run();
  });

  it('publishes a session\'s socket in its own directory: made, forwarded over the control socket to its own host listener, made usable; a spare is ready for the next', async () => {
    const { tunnel, children, mux, hostDir, ready } = setup();
    await ready();
    const first = await tunnel.open();
    expect(first.vmDir).toMatch(new RegExp(`^${TUNNEL_DIR}/[0-9a-f]{16}$`));
    const control = controlOf(children[0]);
    const name = path.basename(first.vmDir);
    expect(mux.calls).toContain(`${control} open ${first.vmDir}/agent.sock ${name}.sock`);
    expect(children[0]?.commands()).toEqual(expect.arrayContaining([expect.stringMatching(new RegExp(`^m \\d+ ${name}$`)) as string, expect.stringMatching(new RegExp(`^p \\d+ ${name}$`)) as string]));
    // Its host listener is this user's alone.
    expect(first.slot.endpoint.socketPath).toBe(path.join(hostDir, `${name}.sock`));
    await vi.waitFor(() => {
      expect(mux.calls.filter((call) => call.includes(' open '))).toHaveLength(2);
    });
    const before = mux.calls.length;
    const second = await tunnel.open();
    // The spare, taken: published already; a new spare is on its way.
    expect(mux.calls.slice(0, before)).toContain(`${control} open ${second.vmDir}/agent.sock ${path.basename(second.vmDir)}.sock`);
    expect(tunnel.describe(2)).toMatchObject({ endpoints: 2 });
  });

  it('a session that ends stops its listener at once, cancels its forward and removes its directory; kept, it leaves the VM alone', async () => {
    const { tunnel, children, mux, ready } = setup();
    await ready();
    const ended = await tunnel.open();
    const kept = await tunnel.open();
    const connected = net.connect(ended.slot.endpoint.socketPath);
    await new Promise((resolve) => connected.once('connect', resolve));
    const closed = new Promise((resolve) => connected.once('close', resolve));
    connected.on('error', () => undefined);
    await tunnel.close(ended.slot, false);
    await closed;
    const name = path.basename(ended.vmDir);
    await vi.waitFor(() => {
      expect(children[0]?.commands()).toContainEqual(expect.stringMatching(new RegExp(`^r \\d+ ${name}$`)));
    });
    expect(mux.calls).toContain(`${controlOf(children[0])} close ${ended.vmDir}/agent.sock ${name}.sock`);
    const keptName = path.basename(kept.vmDir);
    const naming = () => [...mux.calls, ...(children[0]?.commands() ?? [])].filter((line) => line.includes(keptName));
    const before = naming();
    await tunnel.close(kept.slot, true);
    await tunnel.check();
    expect(naming()).toEqual(before);
  });

  it('a session that ends does not wait for the VM; a removal that fails is retried at the next sweep', async () => {
    const { tunnel, children, mux, ready } = setup();
    await ready();
    const slow = await tunnel.open();
    const child = children[0];
    child?.withhold.add('r');
    let closed = false;
    void tunnel.close(slow.slot, false).then(() => {
      closed = true;
    });
    // Its listener stopped and close returned while the VM has not answered the removal yet.
    await vi.waitFor(() => {
      expect(closed).toBe(true);
    });
    expect(child?.commands()).toContainEqual(expect.stringMatching(new RegExp(`^r \\d+ ${path.basename(slow.vmDir)}$`)));
    child?.withhold.clear();
    child?.answerWithheld();

    const broken = await tunnel.open();
    const name = path.basename(broken.vmDir);
    mux.failClose = true;
    await tunnel.close(broken.slot, false);
    const removals = () => (child?.commands() ?? []).filter((line) => new RegExp(`^r \\d+ ${name}$`).test(line));
    await vi.waitFor(() => {
      expect(mux.calls).toContain(`${controlOf(child)} close ${broken.vmDir}/agent.sock ${name}.sock`);
    });
    expect(removals()).toEqual([]);
    await tunnel.check();
    expect(removals()).toHaveLength(1);
  });

  it('a refill costs the VM the forward and `p`: the next spare\'s directory is made along with the last `p`; cold, the session\'s commands go first', async () => {
    const { tunnel, children, mux, ready } = setup();
    await ready();
    const first = await tunnel.open();
    const opened = () => mux.calls.filter((call) => call.includes(' open ')).map((call) => path.basename(path.dirname(call.split(' ')[2] ?? '')));
    const verbs = () => (children[0]?.commands() ?? []).map((line) => { const [verb, , name] = line.split(' '); return `${verb ?? ''} ${name ?? ''}`; });
    await vi.waitFor(() => {
      expect(opened()).toHaveLength(2);
      expect(verbs()).toHaveLength(5);
    });
    const spare = opened()[1] ?? '';
    // The session's `m` and `p`, then the spare's directory with that `p`, then the spare's `p` and the next one's `m`.
    const next = verbs()[4]?.split(' ')[1] ?? '';
    expect(verbs()).toEqual([`m ${path.basename(first.vmDir)}`, `p ${path.basename(first.vmDir)}`, `m ${spare}`, `p ${spare}`, `m ${next}`]);
    const taken = await tunnel.open();
    expect(path.basename(taken.vmDir)).toBe(spare);
    await vi.waitFor(() => {
      expect(opened()).toEqual([path.basename(first.vmDir), spare, next]);
    });
    // The refill's directory was made once, ahead of it: only its `p` (and the one after's `m`) follow.
    await vi.waitFor(() => {
      expect(verbs().slice(5, 7)).toEqual([`p ${next}`, expect.stringMatching(/^m [0-9a-f]{16}$/) as string]);
    });
    expect(verbs().filter((line) => line === `m ${next}`)).toHaveLength(1);
  });

  it('a new ssh asks for a session directory behind its script, before it is ready; a cold acquire\'s session takes it', async () => {
    const { tunnel, children } = setup();
    tunnel.start();
    const child = children[0];
    const [script, queued] = (child?.stdinText ?? '').split('\n');
    expect(script).toContain(`n='${DIR_NAME}'`);
    expect(queued).toMatch(/^m \d+ [0-9a-f]{16}$/);
    const opening = tunnel.open();
    child?.ready();
    const session = await opening;
    expect(path.basename(session.vmDir)).toBe(queued?.split(' ')[2]);
    expect(child?.commands().filter((line) => line.startsWith('m ') && line.endsWith(` ${path.basename(session.vmDir)}`))).toHaveLength(1);
  });

  it('stopping as the daemon stops keeps the sessions\' directories and removes the spare\'s and the next spare\'s', async () => {
    const { tunnel, children, mux, ready } = setup({ keeping: true });
    await ready();
    const held = await tunnel.open();
    await vi.waitFor(() => {
      expect(children[0]?.commands()).toHaveLength(5);
    });
    const made = (children[0]?.commands() ?? []).filter((line) => line.startsWith('m ')).map((line) => line.split(' ')[2] ?? '');
    expect(made).toHaveLength(3);
    await tunnel.halt();
    const removed = (children[0]?.commands() ?? []).filter((line) => line.startsWith('r ')).map((line) => line.split(' ')[2]);
    expect(removed.sort()).toEqual(made.filter((name) => name !== path.basename(held.vmDir)).sort());
    expect(mux.calls.filter((call) => call.includes(' close '))).toEqual([]);
  });

  it('a new generation forwards every session\'s socket again at the same path; one that ended meanwhile has its directory removed', async () => {
    const { tunnel, children, mux, ready } = setup();
    await ready();
    const live = await tunnel.open();
    const gone = await tunnel.open();
    children[0]?.exit(255);
    await tunnel.close(gone.slot, false);
    await vi.waitFor(() => {
      expect(children).toHaveLength(2);
    }, { timeout: 5_000 });
    children[1]?.ready();
    await tunnel.whenReady();
    await vi.waitFor(() => {
      expect(mux.calls).toContain(`${controlOf(children[1])} open ${live.vmDir}/agent.sock ${path.basename(live.vmDir)}.sock`);
    });
    expect(children[1]?.commands()).toContainEqual(expect.stringMatching(new RegExp(`^r \\d+ ${path.basename(gone.vmDir)}$`)));
    expect(mux.calls.filter((call) => call.startsWith(controlOf(children[1])) && call.includes(path.basename(gone.vmDir)))).toEqual([]);
  });

  it('the sweep finds a session socket in the VM that is not the one sshd bound, forwards it anew and says so', async () => {
    const { tunnel, children, mux, ready } = setup();
    await ready();
    const session = await tunnel.open();
    const name = path.basename(session.vmDir);
    await tunnel.check();
    expect(tunnel.describe(1)).toMatchObject({ restarts: 0, lastError: null });
    if (children[0] !== undefined) children[0].replaced = [name];
    await tunnel.check();
    const control = controlOf(children[0]);
    expect(mux.calls.slice(-2)).toEqual([`${control} close ${session.vmDir}/agent.sock ${name}.sock`, `${control} open ${session.vmDir}/agent.sock ${name}.sock`]);
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', restarts: 1, lastError: expect.stringContaining('was not the one sshd bound; forwarded it anew') as string });
  });

  it('a bind sshd refuses is TUNNEL_BIND_REFUSED, naming SELinux where the VM enforces it, and not the session\'s path', async () => {
    const { tunnel, mux, ready } = setup();
    await ready('1');
    mux.refuse = 'remote port forwarding failed for listen path /tmp/sandboxd-x/secret/agent.sock';
    const refused = await tunnel.open().catch((error: unknown) => error);
    expect(refused).toMatchObject({
      code: 'TUNNEL_BIND_REFUSED',
      message: 'sshd behind connection machine refused to bind the agent socket: remote port forwarding failed; SELinux enforces in that VM and is the likely cause (it can deny sshd-session the bind)',
    });
  });
});

describe('Tunnel and the VM (fake ssh)', () => {
  afterEach(async () => {
    vi.useRealTimers();
    await cleanup.run();
  });

  it('sends its script on stdin: no VM path is on any argv, the remote command is the fixed stub', async () => {
    const { children, ready } = setup();
    await ready();
    const args = children[0]?.args ?? [];
    expect(args.at(-1)).toBe(REMOTE_STUB);
    expect(args).not.toContain('-R');
    expect(args.join(' ')).not.toContain('/tmp/sandboxd-x');
    const script = children[0]?.stdinText.split('\n')[0] ?? '';
    expect(script).toContain(`n='${DIR_NAME}'`);
    expect(args).toContain('ControlMaster=yes');
  });

  it('asks the VM over its own connection, one line per path, and matches the answers by id', async () => {
    const { tunnel, children, ready } = setup();
    await ready();
    const child = children[0];
    const asked = tunnel.ask(['/Users/me/p', '/Volumes/x']);
    await vi.waitFor(() => {
      expect(child?.stdinText).toMatch(/s \d+ \/Volumes\/x\n/);
    });
    const id = (subject: string): string => new RegExp(`s (\\d+) ${subject}\\n`).exec(child?.stdinText ?? '')?.[1] ?? '';
    child?.stdout.write(`sandboxd-seen ${id('/Volumes/x')} -\nsandboxd-seen ${id('/Users/me/p')} d\n`);
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
  });

  it('an unreachable machine is re-discovered before the next attempt, which follows it to its new port', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const moved = 'ssh://core@127.0.0.1:3333/run/podman.sock';
    const rediscover = vi.fn(() => Promise.resolve({ name: 'machine', uri: moved, identity: '/k', isDefault: true, isMachine: false, target: parseSshUri(moved, 'machine') }));
    const { tunnel, children, ready } = setup({ rediscover });
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
  });

  it('an ssh that dies for another reason is retried without asking podman again', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const rediscover = vi.fn(() => Promise.reject(new Error('not expected')));
    const { children, ready } = setup({ rediscover });
    await ready();
    children[0]?.exit(255);
    await vi.advanceTimersByTimeAsync(500);
    expect(children).toHaveLength(2);
    expect(rediscover).not.toHaveBeenCalled();
  });

  it('a re-discovery that fails retries the old address', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const rediscover = vi.fn(() => Promise.reject(new Error('podman is gone')));
    const { children, ready } = setup({ rediscover });
    await ready();
    children[0]?.fail('ssh: connect to host 127.0.0.1 port 2222: Connection refused\n');
    await vi.advanceTimersByTimeAsync(500);
    expect(rediscover).toHaveBeenCalledTimes(1);
    const args = children[1]?.args ?? [];
    expect(args[args.indexOf('-p') + 1]).toBe('2222');
  });

  it('says in the log when the VM could not lock the tunnel dir against tmpfiles, and runs anyway', async () => {
    const { tunnel, children, logs } = setup();
    tunnel.start();
    const ready = tunnel.whenReady();
    children[0]?.stdout.write('sandboxd-selinux none\nsandboxd-unlocked\nsandboxd-ready\n');
    await ready;
    expect(logs).toContainEqual(expect.objectContaining({ msg: expect.stringContaining('cannot lock the tunnel directory in the VM') as string, tunnelId: 'tun_abcdef123456' }));
  });
});

describe('Tunnel and a root another VM user holds (fake ssh)', () => {
  afterEach(async () => {
    vi.useRealTimers();
    await cleanup.run();
  });

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
    const { tunnel, children, records, logs } = setup({ replaceRoot });
    tunnel.start();
    const ready = tunnel.whenReady();
    taken(children[0]);
    await vi.waitFor(() => {
      expect(children).toHaveLength(2);
    });
    expect(replaced).toEqual(['/tmp/sandboxd-x']);
    expect(rootOf(children[1])).toBe('/tmp/sandboxd-0123456789abcdef');
    children[1]?.ready();
    await ready;
    expect(tunnel.vmDir).toBe(`/tmp/sandboxd-0123456789abcdef/${DIR_NAME}`);
    expect(tunnel.describe(1)).toMatchObject({ state: 'ready', socketPath: `/tmp/sandboxd-0123456789abcdef/${DIR_NAME}/*/agent.sock`, lastError: null });
    expect(records.at(-1)).toMatchObject({ vmDir: `/tmp/sandboxd-0123456789abcdef/${DIR_NAME}` });
    expect(logs).toContainEqual(
      expect.objectContaining({
        msg: 'the tunnel root in the VM belongs to someone else; left it alone and chose a new one',
        taken: '/tmp/sandboxd-x',
        root: '/tmp/sandboxd-0123456789abcdef',
        tunnelId: 'tun_abcdef123456',
      }),
    );
  });

  it('fails with TUNNEL_FAILED once three new names in a row were taken too', async () => {
    let next = 0;
    const replaceRoot = () => Promise.resolve(`/tmp/sandboxd-000000000000000${String((next += 1))}`);
    const { tunnel, children } = setup({ replaceRoot });
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
  const argv = (pid: number): string[] => ['ssh', '-T', '-o', 'ControlMaster=yes', '-o', `ControlPath=/run/t/${String(pid)}`, '--', 'core@h', REMOTE_STUB];
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
