import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSshUri, type PodmanConnection } from '../../daemon/podman/connections.js';
import { createMachineVolumes, machineConfigDirs, machineOf, NODE_MACHINE_CONFIG_FS, parseMachineConfig, readMachineConfigs, type MachineConfig } from '../../daemon/podman/machine-config.js';
import { DEFAULT_MACHINE_SHARES } from '../../daemon/podman/vm-visibility.js';
import { ROOT } from '../helpers.js';

/** Real output captured on Macs (sources in test/fixtures/mac/SOURCES.md). */
const fixture = (name: string): string => readFileSync(path.join(ROOT, 'test/fixtures/mac', name), 'utf8');

const connection = (name: string, uri: string, isMachine = true): PodmanConnection => ({ name, uri, identity: null, isDefault: false, isMachine, target: parseSshUri(uri, name) });

/** The rows of `podman system connection list` in table form: columns are runs of two or more blanks apart. */
function tableRows(text: string): { name: string; uri: string }[] {
  return text
    .split('\n')
    .slice(1)
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [name = '', uri = ''] = line.trim().split(/\s{2,}/);
      return { name, uri };
    });
}

/**
 * A machine's config as podman 5 writes it. No real one has been published, so this follows
 * podman's `vmconfigs.MachineConfig` and `Mount` structs (v5.8.2, pkg/machine/vmconfigs/config.go)
 * field for field; replace it with a pasted `~/.config/containers/podman/machine/*\/*.json`.
 */
function configJson(name: string, port: number, mounts: { source: string; target: string }[] | null): string {
  const sha = (text: string): string => createHash('sha256').update(text).digest('hex').slice(0, 36);
  return JSON.stringify({
    ConfigPath: { Path: `/Users/me/.config/containers/podman/machine/applehv/${name}.json` },
    Created: '2024-03-01T13:48:37.611598-05:00',
    GvProxy: { GvProxy: { Path: '/opt/podman/bin/gvproxy' }, HostSocks: null, RemoteSocket: { Path: '/var/folders/x/T/podman/gvproxy.sock' } },
    HostUser: { Modified: false, Rootful: true, UID: 501 },
    LastUp: '0001-01-01T00:00:00Z',
    Mounts:
      mounts === null
        ? null
        : mounts.map((mount) => ({ ReadOnly: false, Source: mount.source, Tag: sha(mount.source), Target: mount.target, Type: 'virtiofs', OriginalInput: `${mount.source}:${mount.target}`, VSockNumber: null })),
    Name: name,
    Resources: { CPUs: 5, DiskSize: 100, Memory: 2048, USBs: [] },
    SSH: { IdentityPath: '/Users/me/.local/share/containers/podman/machine/machine', Port: port, RemoteUsername: 'core' },
    Starting: false,
    Version: 1,
    AppleHypervisor: { Vfkit: { Endpoint: 'http://localhost:60194', BinaryPath: null } },
  });
}

/**
 * A qemu machine's config as podman 4 writes it (`machine.WriteConfig`, an indented
 * json.Encoder): `qemu.MachineVM` field for field (v4.9.5, pkg/machine/qemu/machine.go), whose
 * embedded `HostUser`, `ImageConfig`, `ResourceConfig` and `SSHConfig` (pkg/machine/config.go)
 * encoding/json writes as top-level fields: the ssh `Port` is not under `SSH`. Its mounts are
 * `machine.Mount` (9p over virtfs, tags `vol<i>`); the connections it adds are
 * `ssh://core@127.0.0.1:<Port>/run/user/<uid>/podman/podman.sock` and its `-root`
 * (`AddSSHConnectionsToPodmanSocket`, pkg/machine/machine_common.go).
 */
function configJson4(name: string, port: number, mounts: { source: string; target: string }[]): string {
  const runtime = '/var/folders/1p/ngrgvh_94rb9x3527c7h4hf40000gn/T/podman';
  return JSON.stringify(
    {
      ConfigPath: { Path: `/Users/me/.config/containers/podman/machine/qemu/${name}.json` },
      CmdLine: ['/opt/homebrew/bin/qemu-system-aarch64', '-m', '2048', '-smp', '1', '-qmp', `unix:${runtime}/qmp_${name}.sock,server=on,wait=off`],
      Rootful: false,
      UID: 501,
      HostUserModified: false,
      IgnitionFilePath: { Path: `/Users/me/.config/containers/podman/machine/qemu/${name}.ign` },
      ImageStream: 'testing',
      ImagePath: { Path: `/Users/me/.local/share/containers/podman/machine/qemu/${name}_fedora-coreos-39.20240128.2.2-qemu.aarch64.qcow2` },
      Mounts: mounts.map((mount, index) => ({ ReadOnly: false, Source: mount.source, Tag: `vol${String(index)}`, Target: mount.target, Type: '9p' })),
      Name: name,
      PidFilePath: { Path: `${runtime}/${name}_proxy.pid` },
      VMPidFilePath: { Path: `${runtime}/${name}_vm.pid` },
      QMPMonitor: { Address: { Path: `${runtime}/qmp_${name}.sock` }, Network: 'unix', Timeout: 2000000000 },
      ReadySocket: { Path: `${runtime}/${name}_ready.sock` },
      CPUs: 1,
      DiskSize: 100,
      Memory: 2048,
      USBs: [],
      IdentityPath: `/Users/me/.ssh/${name}`,
      Port: port,
      RemoteUsername: 'core',
      Starting: false,
      Created: '2024-02-06T10:21:03.521374+01:00',
      LastUp: '2024-02-06T10:25:41.108233+01:00',
    },
    null,
    ' ',
  );
}

const DEFAULT_VOLUMES = DEFAULT_MACHINE_SHARES.map((share) => ({ source: share, target: share }));

describe('where a machine keeps its config', () => {
  it('`podman machine inspect` prints no volumes; its ConfigDir is the provider dir this reads', () => {
    const inspect = JSON.parse(fixture('podman-machine-inspect.applehv.5.0-dev.json')) as Record<string, unknown>[];
    expect(inspect).toHaveLength(1);
    expect(inspect[0]).not.toHaveProperty('Mounts');
    const configDir = (inspect[0]?.ConfigDir as { Path: string }).Path;
    expect(machineConfigDirs({}, '/Users/cdrage')).toContain(configDir);
    expect(machineConfigDirs({ XDG_CONFIG_HOME: '/Users/cdrage/.config' }, '/elsewhere')).toContain(configDir);
    // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    expect(machineConfigDirs({ XDG_CONFIG_HOME: 'conf' }, '/Users/cdrage')).toContain(configDir);
  });

  it('an applehv machine shares the default directories, whose tags are the config\'s Mounts[].Tag', () => {
    const shared = [...fixture('vfkit-cmdline.applehv.podman5.txt').matchAll(/virtio-fs,sharedDir=([^,]+),mountTag=([0-9a-f]+)/g)];
    expect(shared.map((match) => match[1])).toEqual([...DEFAULT_MACHINE_SHARES]);
    for (const [, dir = '', tag] of shared) expect(tag).toBe(createHash('sha256').update(dir).digest('hex').slice(0, 36));
  });
});

describe('which machine a connection reaches', () => {
  const foo = parseMachineConfig('/c/applehv/foo.json', configJson('foo', 49159, DEFAULT_VOLUMES));
  const foobar = parseMachineConfig('/c/applehv/foobar.json', configJson('foobar', 64889, [{ source: '/Users', target: '/Users' }]));
  const configs = [foo, foobar].filter((one): one is MachineConfig => one !== null);

  it('parses the name, the ssh port and the volumes; null Mounts is no volume, other JSON is no machine', () => {
    expect(foo).toEqual({ file: '/c/applehv/foo.json', name: 'foo', port: 49159, volumes: DEFAULT_VOLUMES });
    expect(parseMachineConfig('/c/x.json', configJson('bare', 1, null))?.volumes).toEqual([]);
    expect(parseMachineConfig('/c/x.json', '{"Name":"x"}')).toBeNull();
    expect(parseMachineConfig('/c/x.json', 'not json')).toBeNull();
  });

  it('reads a podman 4 machine, whose ssh port is the top-level Port, and the connection podman 4 adds for it reaches it', () => {
    const old = parseMachineConfig('/c/qemu/podman-machine-default.json', configJson4('podman-machine-default', 50612, [{ source: '/Users/me', target: '/Users/me' }]));
    expect(old).toEqual({ file: '/c/qemu/podman-machine-default.json', name: 'podman-machine-default', port: 50612, volumes: [{ source: '/Users/me', target: '/Users/me' }] });
    const both = [...configs, ...(old === null ? [] : [old])];
    expect(machineOf(connection('podman-machine-default', 'ssh://core@127.0.0.1:50612/run/user/501/podman/podman.sock'), both)?.name).toBe('podman-machine-default');
    expect(machineOf(connection('podman-machine-default-root', 'ssh://root@127.0.0.1:50612/run/podman/podman.sock'), both)?.name).toBe('podman-machine-default');
    // Neither version's port: no machine, rather than a guess.
    expect(parseMachineConfig('/c/x.json', JSON.stringify({ Name: 'x', Mounts: [] }))).toBeNull();
    expect(parseMachineConfig('/c/x.json', JSON.stringify({ Name: 'x', Port: '50612' }))).toBeNull();
  });

  it('both `<name>` and `<name>-root` of the real connection table reach the machine on their port', () => {
    const rows = tableRows(fixture('podman-system-connection-list.table.macos.podman4.txt'));
    expect(rows.map((row) => row.name)).toEqual(['foo', 'foo-root', 'foobar', 'foobar-root']);
    const reached = rows.map((row) => machineOf(connection(row.name, row.uri), configs)?.name);
    expect(reached).toEqual(['foo', 'foo', 'foobar', 'foobar']);
  });

  it('several configs on one port are told apart by name; none is null', () => {
    const stale = parseMachineConfig('/c/libkrun/old.json', configJson('old', 49159, []));
    const both = [...configs, ...(stale === null ? [] : [stale])];
    expect(machineOf(connection('foo-root', 'ssh://root@127.0.0.1:49159/run/podman/podman.sock'), both)?.file).toBe('/c/applehv/foo.json');
    expect(machineOf(connection('other', 'ssh://root@127.0.0.1:49159/run/podman/podman.sock'), both)).toBeNull();
    expect(machineOf(connection('gone', 'ssh://core@127.0.0.1:1234/run/podman/podman.sock'), configs)).toBeNull();
  });

  it('only a connection podman calls a machine\'s, on loopback, has one', () => {
    expect(machineOf(connection('foo', 'ssh://core@127.0.0.1:49159/x', false), configs)).toBeNull();
    expect(machineOf(connection('foo', 'ssh://core@build.example:49159/x'), configs)).toBeNull();
    expect(machineOf(connection('foo', 'ssh://core@localhost:49159/x'), configs)?.name).toBe('foo');
  });
});

describe('readMachineConfigs (the files on disk)', () => {
  let root = '';
  afterEach(() => {
    if (root !== '') rmSync(root, { recursive: true, force: true });
  });

  it('reads every provider dir present, and skips foreign, oversized and symlinked files', async () => {
    root = mkdtempSync(path.join(tmpdir(), 'sandboxd-machines-'));
    const [applehv = '', libkrun = ''] = machineConfigDirs({ XDG_CONFIG_HOME: root }, '/nowhere');
    mkdirSync(applehv, { recursive: true });
    mkdirSync(libkrun, { recursive: true });
    writeFileSync(path.join(applehv, 'podman-machine-default.json'), configJson('podman-machine-default', 59284, DEFAULT_VOLUMES));
    writeFileSync(path.join(applehv, 'podman-machine-default.ign'), '{}');
    writeFileSync(path.join(applehv, 'broken.json'), '{');
    writeFileSync(path.join(applehv, 'huge.json'), configJson('huge', 1, [{ source: '/x'.repeat(200_000), target: '/x' }]));
    writeFileSync(path.join(root, 'elsewhere.json'), configJson('linked', 2, []));
    symlinkSync(path.join(root, 'elsewhere.json'), path.join(applehv, 'linked.json'));
    writeFileSync(path.join(libkrun, 'krun.json'), configJson('krun', 60000, [{ source: '/Users', target: '/Users' }]));
    const found = await readMachineConfigs(machineConfigDirs({ XDG_CONFIG_HOME: root }, '/nowhere'));
    expect(found.map((config) => [config.name, config.port])).toEqual([
      ['podman-machine-default', 59284],
      ['krun', 60000],
    ]);
  });

  it('reads a machine\'s volumes again when its config changes, and never for a connection that is no machine\'s', async () => {
    root = mkdtempSync(path.join(tmpdir(), 'sandboxd-machines-'));
    const dirs = machineConfigDirs({ XDG_CONFIG_HOME: root }, '/nowhere');
    const [applehv = ''] = dirs;
    mkdirSync(applehv, { recursive: true });
    const file = path.join(applehv, 'vm.json');
    writeFileSync(file, configJson('vm', 40000, [{ source: '/Users', target: '/Users' }]));
    const reads: string[] = [];
    const volumesOf = createMachineVolumes({
      now: () => 0,
      ttlMs: 30_000,
      defer: (work) => {
        work();
      },
      files: {
        readdir: (dir) => {
          reads.push(dir);
          return NODE_MACHINE_CONFIG_FS.readdir(dir);
        },
        readText: (one, max) => NODE_MACHINE_CONFIG_FS.readText(one, max),
      },
    });
    const vm = connection('vm', 'ssh://core@127.0.0.1:40000/run/user/501/podman/podman.sock');
    expect(await volumesOf({ connection: vm, dirs })).toEqual([{ source: '/Users', target: '/Users' }]);
    expect(await volumesOf({ connection: vm, dirs })).toEqual([{ source: '/Users', target: '/Users' }]);
    const before = reads.length;
    expect(await volumesOf({ connection: vm, dirs })).toEqual([{ source: '/Users', target: '/Users' }]);
    expect(reads).toHaveLength(before);
    // The machine made again with another volume (`podman machine rm` + `init --volume`).
    writeFileSync(file, configJson('vm', 40000, [{ source: '/Users', target: '/Users' }, { source: '/Volumes/work', target: '/Volumes/work' }]));
    expect((await volumesOf({ connection: vm, dirs }))?.map((volume) => volume.source)).toEqual(['/Users', '/Volumes/work']);
    reads.length = 0;
    expect(await volumesOf({ connection: { ...vm, isMachine: false }, dirs })).toBeNull();
    expect(reads).toEqual([]);
  });
});
