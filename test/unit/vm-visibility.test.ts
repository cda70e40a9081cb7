import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import type { Mount } from '../../shared/contracts/plan.js';
import type { AcquireInput } from '../../shared/contracts/sessions.js';
import { createLogger } from '../../daemon/os/logger.js';
import { visibleMounts } from '../../daemon/podman/vm-visibility.js';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { chooseSite, containerSite, siteArgs } from '../../daemon/podman/engine-site.js';
import { machineNameOf, sharedByVolumes } from '../../daemon/podman/machine-inspect.js';
import { probeVm } from '../../daemon/podman/vm-probe.js';
import { VmView } from '../../daemon/podman/vm-view.js';
import { REMOTE_STUB } from '../../daemon/podman/ssh-command.js';
import type { PathKind } from '../../daemon/podman/vm-queries.js';

const mount = (source: string, purpose: string): Mount => ({ source, target: source, readOnly: purpose !== 'workdir', purpose });
const connectionOf = (name: string, uri: string, isMachine = false): PodmanConnection => ({
  name,
  uri,
  identity: null,
  isDefault: true,
  isMachine,
  target: parseSshUri(uri, name),
});
const machine = connectionOf('podman-machine-default', 'ssh://core@127.0.0.1:50000/run/user/501/podman/podman.sock', true);
const remote = connectionOf('box', 'ssh://me@build.example:22/run/podman/podman.sock', false);
const MAC_VOLUMES = [
  { source: '/Users', target: '/Users' },
  { source: '/private', target: '/private' },
  { source: '/var/folders', target: '/var/folders' },
];

describe('visibleMounts (what the VM cannot see)', () => {
  const site = { connection: 'podman-machine-default', kind: 'machine' as const, shares: ['/Users', '/private', '/var/folders'] };

  it('drops optional mounts it cannot see with a warning naming each, once per source', () => {
    const mounts = [
      mount('/Users/me/p', 'workdir'),
      mount('/opt/homebrew/etc/gitconfig', 'git config'),
      { ...mount('/opt/homebrew/etc/gitconfig', 'git config'), target: '/root/.gitconfig' },
      mount('/Volumes/keys/known_hosts', 'known_hosts'),
      mount('/tmp/sandboxd-0123456789/abc', 'ssh agent'),
    ];
    const seen = new Map([
      ['/Users/me/p', true],
      ['/opt/homebrew/etc/gitconfig', false],
      ['/Volumes/keys/known_hosts', false],
    ]);
    expect(visibleMounts(mounts, seen, site)).toEqual({
      mounts: [mounts[0], mounts[4]],
      warnings: [
        'skipped the git config mount of /opt/homebrew/etc/gitconfig: the VM of Podman machine connection podman-machine-default, where the container runs, cannot see it',
        'skipped the known_hosts mount of /Volumes/keys/known_hosts: the VM of Podman machine connection podman-machine-default, where the container runs, cannot see it',
      ],
    });
  });

  it.each([
    ['workdir', '/Volumes/work/p'],
    ['requested mount', '/Volumes/data'],
  ])('a %s it cannot see fails with MOUNT_NOT_SHARED, the path and the remedy', (purpose, source) => {
    expect(() => visibleMounts([mount(source, purpose)], new Map([[source, false]]), site)).toThrow(
      expect.objectContaining({
        code: 'MOUNT_NOT_SHARED',
        message: `the ${purpose} ${source} is not visible to the VM of Podman machine connection podman-machine-default, where the container runs`,
        remedy: `Share it with the machine (\`podman machine init --volume ${source}:${source}\`, on a new machine) or move the project under a shared directory (it shares /Users, /private, /var/folders).`,
      }),
    );
  });

  it('a machine whose shares are unknown is still named a machine, with the default shares in the remedy', () => {
    expect(() => visibleMounts([mount('/Volumes/work/p', 'workdir')], new Map([['/Volumes/work/p', false]]), { connection: 'podman-machine-default', kind: 'machine', shares: [] })).toThrow(
      expect.objectContaining({
        code: 'MOUNT_NOT_SHARED',
        message: expect.stringContaining('the VM of Podman machine connection podman-machine-default') as string,
        remedy: expect.stringContaining('(by default a machine shares /Users, /private, /var/folders)') as string,
      }),
    );
  });

  it('for a remote host, the remedy says it sees none of this host\'s paths', () => {
    expect(() => visibleMounts([mount('/home/me/p', 'workdir')], new Map([['/home/me/p', false]]), { connection: 'box', kind: 'remote', shares: [] })).toThrow(
      expect.objectContaining({ code: 'MOUNT_NOT_SHARED', message: expect.stringContaining('the remote host of connection box') as string, remedy: expect.stringContaining('a remote host sees none of this host\'s paths') as string }),
    );
  });
});

describe('podman machine volumes', () => {
  it('a path is shared when it lies in a volume mounted at the same path', () => {
    expect(sharedByVolumes('/Users/me/p', MAC_VOLUMES)).toBe(true);
    expect(sharedByVolumes('/Users', MAC_VOLUMES)).toBe(true);
    expect(sharedByVolumes('/Usersx/p', MAC_VOLUMES)).toBe(false);
    expect(sharedByVolumes('/opt/homebrew/etc/gitconfig', MAC_VOLUMES)).toBe(false);
    expect(sharedByVolumes('/Users/me/p', [{ source: '/Users', target: '/mnt/users' }])).toBe(false);
  });

  it('names the machine behind either of its connections', () => {
    expect(machineNameOf('podman-machine-default-root')).toBe('podman-machine-default');
    expect(machineNameOf('podman-machine-default')).toBe('podman-machine-default');
  });
});

describe('VmView', () => {
  function view(options: { volumes?: typeof MAC_VOLUMES | null; tunnel?: ((paths: readonly string[]) => Promise<Map<string, PathKind>>) | null; vm?: Record<string, PathKind> }) {
    const probe = vi.fn((_connection: PodmanConnection, paths: readonly string[]) => Promise.resolve(new Map(paths.map((one) => [one, options.vm?.[one] ?? '-'] as const))));
    const ask = options.tunnel ?? null;
    const now = { value: 0 };
    const machineVolumes = vi.fn(() => Promise.resolve(options.volumes ?? null));
    const subject = new VmView({
      machineVolumes,
      tunnels: { readyFor: () => (ask === null ? null : { currentConnection: remote, ready: true, ask }) },
      probe,
      // Stands in for this host's file system.
      hostKind: (one) => Promise.resolve(one.endsWith('/') || !one.includes('.') ? 'd' : 'f'),
      now: () => now.value,
    });
    return { subject, probe, machineVolumes, now };
  }

  it('a machine is judged by its volumes, without any login', async () => {
    const { subject, probe } = view({ volumes: MAC_VOLUMES });
    const sight = await subject.sees(machine, ['/Users/me/p', '/opt/homebrew/etc/gitconfig']);
    expect(sight).toEqual({ kind: 'machine', shares: ['/Users', '/private', '/var/folders'], seen: new Map([['/Users/me/p', true], ['/opt/homebrew/etc/gitconfig', false]]) });
    expect(probe).not.toHaveBeenCalled();
  });

  it('a machine whose config is not found is asked once, and still named a machine', async () => {
    const { subject, probe, machineVolumes } = view({ vm: { '/Users/me/p': 'd' } });
    const sight = await subject.sees(machine, ['/Users/me/p', '/opt/x']);
    expect(sight).toEqual({ kind: 'machine', shares: [], seen: new Map([['/Users/me/p', true], ['/opt/x', false]]) });
    expect(machineVolumes).toHaveBeenCalledTimes(1);
    expect(probe).toHaveBeenCalledTimes(1);
  });

  it('a connection podman does not call a machine\'s is never looked up as one', async () => {
    const { subject, machineVolumes } = view({ volumes: MAC_VOLUMES, vm: { '/srv/p': 'd' } });
    expect((await subject.sees(remote, ['/srv/p'])).kind).toBe('remote');
    expect(machineVolumes).not.toHaveBeenCalled();
  });

  it('another host is asked over a running tunnel; a path counts when the VM has the same kind of thing there', async () => {
    const ask = vi.fn((paths: readonly string[]) => Promise.resolve(new Map<string, PathKind>(paths.map((one) => [one, one === '/srv/p' ? 'd' : one === '/srv/f.conf' ? 'd' : '-']))));
    const { subject, probe } = view({ tunnel: ask });
    const sight = await subject.sees(remote, ['/srv/p', '/srv/f.conf', '/home/me/p']);
    expect(sight.seen).toEqual(new Map([['/srv/p', true], ['/srv/f.conf', false], ['/home/me/p', false]]));
    expect(probe).not.toHaveBeenCalled();
  });

  it('without a tunnel it logs in once, and keeps the answers per connection and path for a while', async () => {
    const { subject, probe, now } = view({ vm: { '/srv/p': 'd' } });
    expect((await subject.sees(remote, ['/srv/p'])).seen.get('/srv/p')).toBe(true);
    await subject.sees(remote, ['/srv/p']);
    expect(probe).toHaveBeenCalledTimes(1);
    now.value = 30_000;
    await subject.sees(remote, ['/srv/p']);
    expect(probe).toHaveBeenCalledTimes(2);
  });

  it('a tunnel that does not answer is replaced by one login', async () => {
    const { subject, probe } = view({ tunnel: () => Promise.reject(new Error('no answer')), vm: { '/srv/p': 'd' } });
    expect((await subject.sees(remote, ['/srv/p'])).seen.get('/srv/p')).toBe(true);
    expect(probe).toHaveBeenCalledTimes(1);
  });
});

describe('where the container runs', () => {
  const base = { engine: 'podman' as const, platform: 'linux' as const, env: {}, connectionRequested: false, sshBridge: 'auto' as const };

  it('podman goes remote on macOS, with a connection, CONTAINER_CONNECTION or an ssh CONTAINER_HOST; docker is not judged here', () => {
    expect(chooseSite(base)).toEqual({ kind: 'local' });
    expect(chooseSite({ ...base, platform: 'darwin' })).toEqual({ kind: 'remote', forcedByTunnel: false });
    expect(chooseSite({ ...base, connectionRequested: true })).toEqual({ kind: 'remote', forcedByTunnel: false });
    expect(chooseSite({ ...base, env: { CONTAINER_CONNECTION: 'x' } })).toEqual({ kind: 'remote', forcedByTunnel: false });
    expect(chooseSite({ ...base, env: { CONTAINER_HOST: 'ssh://h/x' } })).toEqual({ kind: 'remote', forcedByTunnel: false });
    expect(chooseSite({ ...base, env: { CONTAINER_CONNECTION: '' } })).toEqual({ kind: 'local' });
    expect(chooseSite({ ...base, engine: 'docker', platform: 'darwin' })).toEqual({ kind: 'local' });
  });

  it('--ssh-bridge tunnel with a local podman runs the container through the connection, and says so', () => {
    expect(chooseSite({ ...base, sshBridge: 'tunnel' })).toEqual({ kind: 'remote', forcedByTunnel: true });
    expect(siteArgs(connectionOf('lab', 'ssh://root@127.0.0.1:22/x'), true)).toEqual({
      globalArgs: ['--connection', 'lab'],
      warnings: ["--ssh-bridge tunnel with a local podman: the container runs through connection lab (podman --connection lab), where the tunnel's agent socket is"],
    });
    expect(siteArgs(connectionOf('lab', 'ssh://root@127.0.0.1:22/x'), false)).toEqual({ globalArgs: ['--connection', 'lab'], warnings: [] });
    // podman reads CONTAINER_HOST from the caller's environment, as the daemon did.
    expect(siteArgs(connectionOf('CONTAINER_HOST', 'ssh://root@h/x'), false).globalArgs).toEqual([]);
  });

  const input = (extra: Partial<AcquireInput> = {}): AcquireInput =>
    ({ engine: 'podman', sshBridge: 'auto', client: { pid: 1, cwd: '/', env: { CONTAINER_CONNECTION: 'box' } }, ...extra }) as AcquireInput;
  const logger = createLogger({ kind: 'silent' });

  it('checks the plan\'s mounts against what that side sees', async () => {
    const site = await containerSite(input(), {
      platform: 'linux',
      discover: () => Promise.resolve(remote),
      sees: (_connection, paths) => Promise.resolve({ kind: 'remote', shares: [], seen: new Map(paths.map((one) => [one, one === '/srv/p'])) }),
      logger,
    });
    expect(site.globalArgs).toEqual(['--connection', 'box']);
    expect(await site.visible([mount('/srv/p', 'workdir'), mount('/home/me/.gitconfig', 'git config')])).toEqual({
      mounts: [mount('/srv/p', 'workdir')],
      warnings: ['skipped the git config mount of /home/me/.gitconfig: the remote host of connection box, where the container runs, cannot see it'],
    });
  });

  it('when the VM cannot be asked, the plan goes on unchecked and says why', async () => {
    const site = await containerSite(input(), {
      platform: 'linux',
      discover: () => Promise.resolve(remote),
      sees: () => Promise.reject(new Error('ssh: connect to host build.example port 22: Connection refused')),
      logger,
    });
    expect(await site.visible([mount('/srv/p', 'workdir')])).toEqual({
      mounts: [mount('/srv/p', 'workdir')],
      warnings: ['cannot ask connection box which paths it sees, so the mounts are not checked: ssh: connect to host build.example port 22: Connection refused'],
    });
  });

  it('when podman cannot name the connection, an explicit one is still passed on, unchecked', async () => {
    const site = await containerSite(input({ connection: 'gone' }), {
      platform: 'linux',
      discover: () => Promise.reject(new Error('the session asked for connection "gone", which podman does not list')),
      sees: () => Promise.reject(new Error('not asked')),
      logger,
    });
    expect(site.globalArgs).toEqual(['--connection', 'gone']);
    expect(site.warnings).toEqual(['cannot tell which connection the container runs through, so its mounts are not checked: the session asked for connection "gone", which podman does not list']);
  });
});

/** Stands in for a one-off `ssh … <stub>` login: answers the queries written on its stdin. */
class FakeProbe extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly stdin = new PassThrough();
  input = '';
  constructor(readonly args: string[], answer: (input: string) => { stdout: string; stderr: string; code: number }) {
    super();
    this.stdin.on('data', (chunk: Buffer) => (this.input += chunk.toString()));
    this.stdin.on('finish', () => {
      const result = answer(this.input);
      this.stdout.end(result.stdout);
      this.stderr.end(result.stderr);
      setImmediate(() => this.emit('close', result.code));
    });
  }
  kill(): boolean {
    return true;
  }
}

describe('probeVm (one login when no tunnel runs)', () => {
  it('sends the loop and the paths on stdin, never on argv, and reads the answers', async () => {
    let probe: FakeProbe | null = null;
    const answers = await probeVm(remote, ['/srv/p', '/home/me'], {
      knownHostsPath: '/kh',
      spawnSsh: (args) => {
        probe = new FakeProbe(args, () => ({ stdout: 'sandboxd-seen 0 d\nsandboxd-seen 1 -\n', stderr: '', code: 0 }));
        return probe as unknown as ChildProcess;
      },
    });
    expect(answers).toEqual(new Map([['/srv/p', 'd'], ['/home/me', '-']]));
    const used = probe as FakeProbe | null;
    expect(used?.args.at(-1)).toBe(REMOTE_STUB);
    expect(used?.args.join(' ')).not.toContain('/srv/p');
    expect(used?.input).toContain('\ns 0 /srv/p\ns 1 /home/me\n');
  });

  it('a login that fails is classified as a tunnel would be', async () => {
    const failing = probeVm(remote, ['/srv/p'], {
      knownHostsPath: '/kh',
      spawnSsh: (args) => new FakeProbe(args, () => ({ stdout: '', stderr: 'ssh: connect to host build.example port 22: Connection refused\n', code: 255 })) as unknown as ChildProcess,
    });
    await expect(failing).rejects.toMatchObject({ code: 'TUNNEL_UNREACHABLE', message: 'the machine behind connection box is unreachable: ssh: connect to host build.example port 22: Connection refused' });
  });
});
