import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lstatSync, lutimesSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  backoffMs,
  classifySshFailure,
  parseSelinux,
  REMOTE_STUB,
  remoteScript,
  ROOT_TAKEN_MARKER,
  slotPaths,
  sshMasterArgs,
  sshProbeArgs,
  tunnelLayout,
  type TunnelLayout,
} from '../../daemon/podman/ssh-command.js';
import { parseSshUri } from '../../daemon/podman/connections.js';
import { Cleanup } from '../helpers.js';
import { shQuote } from '../../daemon/os/text.js';

const connection = (uri: string, identity: string | null = '/k/id') => ({ name: 'm', uri, identity, isDefault: true, isMachine: false, target: parseSshUri(uri, 'm') });
const layout = tunnelLayout('/tmp/sandboxd-u', 'abc');
const base = { knownHostsPath: '/state/known_hosts', aliveIntervalSeconds: 5, aliveCountMax: 3, connectTimeoutSeconds: 8 };

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

describe('ssh command', () => {
  it('puts each session in a directory of its own in the tunnel dir', () => {
    expect(layout).toEqual({ root: '/tmp/sandboxd-u', dir: '/tmp/sandboxd-u/abc' });
    expect(slotPaths(layout, '0123456789abcdef')).toEqual({ dir: '/tmp/sandboxd-u/abc/0123456789abcdef', socket: '/tmp/sandboxd-u/abc/0123456789abcdef/agent.sock' });
  });

  it('a tunnel\'s ssh is a ControlMaster on a private path, with no forward and no VM path on its argv; loopback machines log in like `podman machine ssh`', () => {
    const local = sshMasterArgs({ ...base, controlPath: '/run/sbx/t/abc.1', connection: connection('ssh://core@127.0.0.1:5000/x') });
    expect(local).toEqual(expect.arrayContaining(['-F', '/dev/null', 'UserKnownHostsFile=/dev/null', 'ControlMaster=yes', 'ControlPath="/run/sbx/t/abc.1"', 'ControlPersist=no', 'ServerAliveInterval=5', '-p', '5000', 'IdentityFile="/k/id"']));
    expect(local).not.toContain('-R');
    expect(local.join(' ')).not.toContain('/tmp/sandboxd-u');
    expect(local.slice(-2)).toEqual(['core@127.0.0.1', REMOTE_STUB]);
    const remote = sshMasterArgs({ ...base, controlPath: '/c', connection: connection('ssh://[2001:db8::1]/x', null) });
    expect(remote).toEqual(expect.arrayContaining(['StrictHostKeyChecking=accept-new', 'UserKnownHostsFile="/state/known_hosts"', '-p', '22']));
    expect(remote.some((arg) => arg.startsWith('IdentityFile='))).toBe(false);
    expect(remote.at(-2)).toBe('2001:db8::1');
  });

  it('hands ssh every path as one option word it reads back as that path (blanks, quotes, backslashes, `#`, `%`)', () => {
    // The Mac state dir has a blank; the rest is what argv_split and percent expansion would eat.
    const knownHosts = `/Users/me/Library/Application Support/it's "q" \\ %h #1/known_hosts`;
    const identity = '/Users/me/.local/share/containers/podman/machine/50% #2/machine';
    const args = sshProbeArgs({ ...base, knownHostsPath: knownHosts, connection: connection('ssh://core@build.example:22/x', identity) });
    expect(args).toContain(`UserKnownHostsFile="/Users/me/Library/Application Support/it's \\"q\\" \\\\ %%h #1/known_hosts"`);
    expect(args).toContain('IdentityFile="/Users/me/.local/share/containers/podman/machine/50%% #2/machine"');
    // What the real ssh makes of it (`-G` prints the options it resolved, known_hosts files expanded).
    const resolved = execFileSync('ssh', ['-G', ...args.slice(0, args.indexOf('--')), 'build.example'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    expect(resolved.split('\n')).toContain(`userknownhostsfile ${knownHosts}`);
    // Unquoted, ssh reads two files (the first, `…/Application`, is where the Mac's host keys went) and a comment.
    const unquoted = execFileSync('ssh', ['-G', '-o', 'UserKnownHostsFile=/Users/me/Library/Application Support/sandboxd #1/known_hosts', 'build.example'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    expect(unquoted.split('\n')).toContain('userknownhostsfile /Users/me/Library/Application Support/sandboxd');
  });

  it('a probe logs in the same way, without a forward, and runs the same stub', () => {
    const probe = sshProbeArgs({ ...base, connection: connection('ssh://core@127.0.0.1:5000/x') });
    expect(probe).not.toContain('-R');
    expect(probe).toEqual(expect.arrayContaining(['ControlMaster=no', 'ControlPath=none']));
    expect(probe.slice(-2)).toEqual(['core@127.0.0.1', REMOTE_STUB]);
  });

  it('builds a one-line remote script that a POSIX shell parses, with every value quoted', () => {
    const hostile = tunnelLayout("/tmp/it's $(x)", 'h');
    const script = remoteScript(hostile);
    expect(script).toContain(`r='/tmp/it'\\''s $(x)'`);
    expect(script).not.toContain('\n');
    execFileSync('sh', ['-n', '-c', script]);
    expect(shQuote("a'b")).toBe(`'a'\\''b'`);
  });

  it('classifies ssh failures by its stderr, keeping its line', () => {
    expect(classifySshFailure('m', 'ssh: connect to host 127.0.0.1 port 1: Connection refused\n', 255)).toMatchObject({
      code: 'TUNNEL_UNREACHABLE',
      message: 'the machine behind connection m is unreachable: ssh: connect to host 127.0.0.1 port 1: Connection refused',
    });
    expect(classifySshFailure('m', 'root@127.0.0.1: Permission denied (publickey).\n', 255)).toMatchObject({
      code: 'TUNNEL_AUTH_FAILED',
      message: 'ssh to connection m was refused: root@127.0.0.1: Permission denied (publickey).',
    });
    expect(classifySshFailure('m', '', 1)).toMatchObject({ code: 'TUNNEL_FAILED', message: 'the tunnel over connection m failed: ssh exited with code 1' });
  });

  it('a refused bind is TUNNEL_BIND_REFUSED, naming SELinux as likely where the VM enforces it', () => {
    const stderr = 'Error: remote port forwarding failed for listen path /tmp/x.sock\n';
    expect(classifySshFailure('m', stderr, 255, 'enforcing')).toMatchObject({
      code: 'TUNNEL_BIND_REFUSED',
      message: 'sshd behind connection m refused to bind the agent socket: Error: remote port forwarding failed for listen path /tmp/x.sock; SELinux enforces in that VM and is the likely cause (it can deny sshd-session the bind)',
      remedy: expect.stringContaining('SELinux') as string,
    });
    expect(classifySshFailure('m', stderr, 255, 'permissive').message).toMatch(/SELinux in the VM is a possible cause \(it is permissive there\)$/);
    expect(classifySshFailure('m', stderr, 255).message).toMatch(/SELinux in the VM is a possible cause$/);
  });

  it('reads the SELinux mode as /sys/fs/selinux/enforce has it', () => {
    expect(['1', '0\n', 'none', ''].map(parseSelinux)).toEqual(['enforcing', 'permissive', 'none', 'none']);
  });

  it('backs off exponentially with a cap', () => {
    expect([0, 1, 2, 3, 4, 5, 10].map((attempt) => backoffMs(attempt))).toEqual([500, 1000, 2000, 4000, 8000, 8000, 8000]);
  });
});

/** Runs the stub in a local /bin/sh standing in for the VM's login shell, the script on its stdin. */
/** `queued`: lines sent in the same write as the script, as a new tunnel sends its first `m`. */
function runRemote(script: string, env: NodeJS.ProcessEnv = process.env, queued = ''): { output: Promise<{ stdout: string; stderr: string; code: number | null }>; send(text: string): void; end(text: string): void; stdout(): string } {
  const child = spawn('/bin/sh', ['-c', REMOTE_STUB], { stdio: ['pipe', 'pipe', 'pipe'], env });
  cleanup.add(() => {
    child.kill('SIGKILL');
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdin.write(`${script}\n${queued}`);
  return {
    output: new Promise((resolve) => child.once('close', (code) => {
      resolve({ stdout, stderr, code });
    })),
    send: (text) => child.stdin.write(text),
    end: (text) => child.stdin.end(text),
    stdout: () => stdout,
  };
}

describe('the remote script in a real shell (this host stands in for the VM)', () => {
  const SLOT = '0123456789abcdef';

  function tempLayout(): TunnelLayout {
    const dir = mkdtempSync('/tmp/sbx-remote-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    return tunnelLayout(path.join(dir, 'root'), 'f'.repeat(32));
  }

  /** Stands in for sshd binding a session's socket (a remote forward), 0600 as its StreamLocalBindMask makes it. */
  async function bind(socket: string): Promise<net.Server> {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    chmodSync(socket, 0o600);
    cleanup.add(() => {
      server.close();
    });
    return server;
  }

  /** Sends a line and waits for the answer with its id. */
  async function command(remote: ReturnType<typeof runRemote>, line: string, id: string): Promise<string> {
    remote.send(`${line}\n`);
    await expect.poll(() => remote.stdout().split('\n').some((answer) => answer.split(' ')[1] === id), { timeout: 5_000 }).toBe(true);
    return remote.stdout().split('\n').find((answer) => answer.split(' ')[1] === id) ?? '';
  }

  it('makes a 0711 tunnel dir under a 0700 root, a 0711 directory per session, a 0666 socket in it; answers queries; removes everything on halt', async () => {
    const at = tempLayout();
    const remote = runRemote(remoteScript(at));
    await expect.poll(() => remote.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    expect(statSync(at.root).mode & 0o777).toBe(0o700);
    expect(statSync(at.dir).mode & 0o777).toBe(0o711);
    const slot = slotPaths(at, SLOT);
    expect(await command(remote, `m 1 ${SLOT}`, '1')).toBe('sandboxd-seen 1 d');
    expect(statSync(slot.dir).mode & 0o777).toBe(0o711);
    // Published before sshd bound it: refused.
    expect(await command(remote, `p 2 ${SLOT}`, '2')).toBe('sandboxd-seen 2 -');
    await bind(slot.socket);
    expect(await command(remote, `p 3 ${SLOT}`, '3')).toBe('sandboxd-seen 3 d');
    expect(statSync(slot.socket).mode & 0o777).toBe(0o666);
    const file = path.join(path.dirname(at.root), 'a file');
    execFileSync('touch', [file]);
    remote.send(`s 7 ${file}\ns 8 ${at.root}\ns 9 /no/such path\n`);
    // Names that are not a daemon's are refused, never acted on.
    expect(await command(remote, 'm 10 ../../etc', '10')).toBe('sandboxd-seen 10 -');
    remote.end('halt\n');
    const { stdout, code } = await remote.output;
    expect(stdout.split('\n').filter((line) => /^sandboxd-seen [789] /.test(line))).toEqual(['sandboxd-seen 7 f', 'sandboxd-seen 8 d', 'sandboxd-seen 9 -']);
    expect(code).toBe(0);
    expect(existsSync(at.dir)).toBe(false);
  });

  it('a command sent in the same write as the script waits on stdin for it, and is answered once the script is ready', async () => {
    const at = tempLayout();
    const remote = runRemote(remoteScript(at), process.env, `m 1 ${SLOT}\n`);
    await expect.poll(() => remote.stdout().includes('sandboxd-seen 1 d'), { timeout: 10_000 }).toBe(true);
    const lines = remote.stdout().split('\n');
    expect(lines.indexOf('sandboxd-ready')).toBeLessThan(lines.indexOf('sandboxd-seen 1 d'));
    expect(statSync(slotPaths(at, SLOT).dir).mode & 0o777).toBe(0o711);
    remote.end('halt\n');
    expect((await remote.output).code).toBe(0);
  });

  it('no command the script runs names a path in the VM: each external program\'s argv is logged through a shim', async () => {
    const at = tempLayout();
    const parent = path.dirname(at.root);
    const shims = path.join(parent, 'bin');
    mkdirSync(shims);
    const log = path.join(parent, 'argv.log');
    // Every program the script may run outside the shell's builtins; each logs its argv, then runs.
    for (const program of ['mkdir', 'chmod', 'rm', 'rmdir', 'ln', 'flock', 'pwd', 'cat']) {
      const real = execFileSync('sh', ['-c', `command -v ${program}`], { encoding: 'utf8' }).trim();
      writeFileSync(path.join(shims, program), `#!/bin/sh\necho "${program} $*" >> ${shQuote(log)}\nexec ${real} "$@"\n`, { mode: 0o755 });
    }
    const remote = runRemote(remoteScript(at), { PATH: `${shims}:${process.env.PATH ?? '/usr/bin:/bin'}` });
    await expect.poll(() => remote.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    const logged = () => readFileSync(log, 'utf8').trim().split('\n');
    const started = logged().length;
    await command(remote, `m 1 ${SLOT}`, '1');
    // A new session's directory costs the VM one process: nothing is in it to remove.
    expect(logged().slice(started)).toEqual([`mkdir -m 711 -- ${SLOT}`]);
    await bind(slotPaths(at, SLOT).socket);
    await command(remote, `p 2 ${SLOT}`, '2');
    await command(remote, `r 3 ${SLOT}`, '3');
    remote.end('halt\n');
    expect((await remote.output).code).toBe(0);
    const argvs = logged();
    // It ran: the root, the tunnel dir and the session's directory were made, and removed on halt.
    expect(argvs.filter((argv) => argv.startsWith('mkdir ')).length).toBeGreaterThanOrEqual(3);
    expect(argvs.some((argv) => argv.startsWith('rm '))).toBe(true);
    expect(argvs.filter((argv) => argv.includes(parent))).toEqual([]);
    // Started again over the root it made, the script runs no mkdir for it.
    const again = runRemote(remoteScript(at), { PATH: `${shims}:${process.env.PATH ?? '/usr/bin:/bin'}` });
    await expect.poll(() => again.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    again.end('halt\n');
    expect((await again.output).code).toBe(0);
    expect(logged().slice(argvs.length).filter((argv) => argv.startsWith('mkdir -m 700'))).toEqual([]);
  });

  it('without the halt word the sessions\' directories stay (the next daemon binds their sockets again), and `m` removes the socket a dead sshd left', async () => {
    const at = tempLayout();
    const first = runRemote(remoteScript(at));
    await expect.poll(() => first.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    const slot = slotPaths(at, SLOT);
    await command(first, `m 1 ${SLOT}`, '1');
    // sshd leaves the file when it stops listening, as a process that exits while listening does.
    execFileSync(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(slot.socket)}, () => process.exit(0))`]);
    expect(await command(first, `p 2 ${SLOT}`, '2')).toBe('sandboxd-seen 2 d');
    first.end('');
    expect((await first.output).code).toBe(0);
    expect(existsSync(slot.socket)).toBe(true);
    const inode = statSync(slot.dir).ino;
    const second = runRemote(remoteScript(at));
    await expect.poll(() => second.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    expect(await command(second, `m 1 ${SLOT}`, '1')).toBe('sandboxd-seen 1 d');
    expect(existsSync(slot.socket)).toBe(false);
    expect(statSync(slot.dir).ino).toBe(inode);
    expect(await command(second, `r 2 ${SLOT}`, '2')).toBe('sandboxd-seen 2 d');
    expect(existsSync(slot.dir)).toBe(false);
    second.end('halt\n');
    expect((await second.output).code).toBe(0);
  });

  it('answers `V` with the sessions whose socket is not the one published, whichever way it was swapped', async () => {
    const at = tempLayout();
    const remote = runRemote(remoteScript(at));
    await expect.poll(() => remote.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    const names = ['1111111111111111', '2222222222222222', '3333333333333333'];
    for (const [index, name] of names.entries()) {
      await command(remote, `m m${String(index)} ${name}`, `m${String(index)}`);
      await bind(slotPaths(at, name).socket);
      await command(remote, `p p${String(index)} ${name}`, `p${String(index)}`);
    }
    expect(await command(remote, 'V 1', '1')).toBe('sandboxd-slots 1');
    // The second one's socket replaced by another listener; the third's removed.
    const second = slotPaths(at, names[1] ?? '').socket;
    renameSync(second, `${second}.moved`);
    await bind(second);
    rmSync(slotPaths(at, names[2] ?? '').socket);
    expect(await command(remote, 'V 2', '2')).toBe(`sandboxd-slots 2 ${names[1] ?? ''} ${names[2] ?? ''}`);
    remote.end('halt\n');
    expect((await remote.output).code).toBe(0);
  });

  it.skipIf(process.getuid?.() !== 0)('leaves a root that another user created first alone and says it is taken', async () => {
    const at = tempLayout();
    mkdirSync(at.root, { mode: 0o777 });
    chmodSync(at.root, 0o777);
    chownSync(at.root, 65534, 65534);
    const { stdout, code } = await runRemote(remoteScript(at)).output;
    expect(code).toBe(6);
    expect(stdout.split('\n')).toContain(ROOT_TAKEN_MARKER);
    expect(statSync(at.root).mode & 0o777).toBe(0o777);
    expect(readdirSync(at.root)).toEqual([]);
  });

  it('never follows a symlink planted at the root: its target keeps its mode and gets no tunnel dir', async () => {
    const at = tempLayout();
    const victim = path.join(path.dirname(at.root), 'victim');
    mkdirSync(victim, { mode: 0o755 });
    symlinkSync(victim, at.root);
    const { stdout, code } = await runRemote(remoteScript(at)).output;
    expect(code).toBe(6);
    expect(stdout.split('\n')).toContain(ROOT_TAKEN_MARKER);
    expect(statSync(victim).mode & 0o777).toBe(0o755);
    expect(readdirSync(victim)).toEqual([]);
  });

  it('acts only on the directory it verified, even when the root is swapped for a symlink right after the check', async () => {
    const at = tempLayout();
    const parent = path.dirname(at.root);
    const victim = path.join(parent, 'victim');
    mkdirSync(victim, { mode: 0o755 });
    // Makes the race window deterministic: the script's first chmod finds the root's name swapped
    // for a symlink to a directory the remote user owns, as another VM user winning the race would
    // leave it (a /tmp without the sticky bit, or a kernel that follows such links).
    const shims = path.join(parent, 'bin');
    mkdirSync(shims);
    writeFileSync(
      path.join(shims, 'chmod'),
      '#!/bin/sh\nif mkdir "$SWAP_ROOT.swapped" 2>/dev/null; then mv "$SWAP_ROOT" "$SWAP_ROOT.moved" && ln -s "$SWAP_VICTIM" "$SWAP_ROOT"; fi\nexec /bin/chmod "$@"\n',
      { mode: 0o755 },
    );
    const remote = runRemote(remoteScript(at), { PATH: `${shims}:${process.env.PATH ?? '/usr/bin:/bin'}`, SWAP_ROOT: at.root, SWAP_VICTIM: victim });
    await expect.poll(() => remote.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    await command(remote, `m 1 ${SLOT}`, '1');
    const moved = path.join(`${at.root}.moved`, path.basename(at.dir));
    expect(existsSync(path.join(moved, SLOT))).toBe(true);
    expect(lstatSync(at.root).isSymbolicLink()).toBe(true);
    expect(statSync(victim).mode & 0o777).toBe(0o755);
    expect(readdirSync(victim)).toEqual([]);
    expect(statSync(`${at.root}.moved`).mode & 0o777).toBe(0o700);
    remote.end('');
    expect((await remote.output).code).toBe(0);
  });

  it('holds a lock on the tunnel dir that keeps systemd-tmpfiles from ageing it out under running containers', async () => {
    const at = tempLayout();
    const parent = path.dirname(at.root);
    const remote = runRemote(remoteScript(at));
    await expect.poll(() => remote.stdout().includes('sandboxd-ready'), { timeout: 10_000 }).toBe(true);
    const slot = slotPaths(at, SLOT);
    await command(remote, `m 1 ${SLOT}`, '1');
    await bind(slot.socket);
    await command(remote, `p 2 ${SLOT}`, '2');
    // The same tree, unlocked: what tmpfiles does to a tunnel dir nobody holds.
    const control = path.join(parent, 'control', SLOT);
    mkdirSync(control, { recursive: true });
    // A socket /proc/net/unix does not list under its name: a process that exits while listening
    // leaves its socket file behind.
    execFileSync(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(path.join(control, 'agent.sock'))}, () => process.exit(0))`]);
    // Eleven days old by access and change time (ctime cannot be set back; the rule below ignores
    // it, which only cleans more than the default rule does), children before their directories.
    const old = new Date(Date.now() - 11 * 24 * 3_600_000);
    const entries = [
      ...[slot.dir, control].flatMap((dir) => readdirSync(dir).map((name) => path.join(dir, name))),
      slot.dir,
      control,
      path.dirname(control),
      at.dir,
      at.root,
    ];
    for (const entry of entries) lutimesSync(entry, old, old);
    // Fedora's /tmp rule is `q /tmp 1777 root root 10d`; the same age on this test's own directory.
    const conf = path.join(parent, 'tmp.conf');
    writeFileSync(conf, `d ${parent} 0700 root root amAM:10d\n`);
    execFileSync('systemd-tmpfiles', ['--clean', conf]);
    expect(existsSync(path.dirname(control))).toBe(false);
    expect(readdirSync(slot.dir).sort()).toEqual(['.bound', 'agent.sock']);
    const connected = await new Promise<boolean>((resolve) => {
      const socket = net.connect(slot.socket, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => {
        resolve(false);
      });
    });
    expect(connected).toBe(true);
    remote.end('halt\n');
    expect((await remote.output).code).toBe(0);
  });
});
