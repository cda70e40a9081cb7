import { describe, expect, it } from 'vitest';
import { podmanVersionOf, userMapping, type UserMappingInput } from '../../daemon/plan/user-namespace.js';
import { userEngine } from '../../daemon/sessions/user-engine.js';
import { AcquireRequest } from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';
import type { IdentifiedEngine } from '../../daemon/engines/engine-identifier.js';

const HOST = { uid: 1001, gid: 1001 };

function input(overrides: Partial<UserMappingInput>): UserMappingInput {
  return { engine: { kind: 'rootless-podman', version: 'podman version 4.3.1' }, user: { uid: 1000, gid: 1000 }, host: HOST, writesHostFiles: true, ...overrides };
}

describe('who the container user is on the host', () => {
  it('rootless Podman 4.3 and later: the user is mapped onto a non-root container user, and that is a notice', () => {
    expect(userMapping(input({}))).toEqual({
      flags: ['--userns=keep-id:uid=1000,gid=1000'],
      warnings: [],
      notices: ['podman: you (uid 1001) are uid 1000 in the container (--userns=keep-id:uid=1000,gid=1000), so it writes the work tree as you'],
    });
    expect(userMapping(input({ engine: { kind: 'rootless-podman', version: 'podman version 5.2.0' }, user: { uid: 1000, gid: 0 } })).flags).toEqual(['--userns=keep-id:uid=1000']);
  });

  it('container root is the user under rootless engines, and the user is the user under rootful ones: nothing to do', () => {
    expect(userMapping(input({ user: { uid: 0, gid: 0 } }))).toEqual({ flags: [], warnings: [], notices: [] });
    expect(userMapping(input({ engine: { kind: 'rootful-docker' }, user: { uid: 1001, gid: 1001 } }))).toEqual({ flags: [], warnings: [], notices: [] });
    expect(userMapping(input({ engine: { kind: 'other' } }))).toEqual({ flags: [], warnings: [], notices: [] });
  });

  it('where no flag can map the user, a warning says what fails and the run argument that fixes it', () => {
    const old = userMapping(input({ engine: { kind: 'rootless-podman', version: 'podman version 3.4.4' } }));
    expect(old.flags).toEqual([]);
    expect(old.warnings).toEqual([
      'container uid 1000 is one of your sub-uids under rootless Podman, not you (uid 1001), and podman 3.4.4 cannot map you onto it (keep-id:uid= needs podman 4.3), so it cannot write the work tree (Permission denied); run as yourself: `--userns=keep-id --user 1001`',
    ]);
    expect(userMapping(input({ engine: { kind: 'rootful-docker' } })).warnings).toEqual([
      "the container user (uid 1000) is not you (uid 1001), and Docker writes files as the container's uid, so it cannot write the work tree (Permission denied); run as yourself: `--user 1001:1001`",
    ]);
    expect(userMapping(input({ engine: { kind: 'rootless-docker' }, user: { uid: 1001, gid: 1001 } })).warnings[0]).toContain('`--user 0`');
    // Nothing of the host is written: nothing to warn about.
    expect(userMapping(input({ engine: { kind: 'rootful-docker' }, writesHostFiles: false })).warnings).toEqual([]);
  });

  it('reads podman --version as podman and podman-remote print it', () => {
    expect(podmanVersionOf('podman version 4.3.1')).toEqual([4, 3]);
    expect(podmanVersionOf('podman-remote version 5.0.0-dev')).toEqual([5, 0]);
    expect(podmanVersionOf('nonsense')).toBeNull();
  });
});

describe('the engine whose users are mapped', () => {
  const request = (body: object) => AcquireRequest.parse({ engine: 'podman', client: { pid: 1, cwd: '/tmp', path: '/usr/bin' }, ...body });
  const docker = (kind: IdentifiedEngine['identity']['kind'], rootless = false): Promise<IdentifiedEngine> =>
    Promise.resolve({ identity: { kind, label: kind, endpoint: 'unix:///var/run/docker.sock', instance: 'eng_1', architecture: 'x86_64', rootless, bridge: { kind: 'relay' } }, docker: '/usr/bin/docker', env: {}, watched: [] });
  const deps = { platform: 'linux' as const, uid: 1001, podmanVersion: () => Promise.resolve('podman version 4.3.1'), identifyDocker: () => docker('docker-engine') };

  it('a local podman of a non-root user is rootless; one behind a connection, CONTAINER_HOST or on a Mac is not judged', async () => {
    expect(await userEngine(request({}), deps)).toEqual({ kind: 'rootless-podman', version: 'podman version 4.3.1' });
    expect(await userEngine(request({ connection: 'machine' }), deps)).toEqual({ kind: 'other' });
    expect(await userEngine(request({ client: { pid: 1, cwd: '/tmp', env: { CONTAINER_HOST: 'unix:///run/podman/podman.sock' } } }), deps)).toEqual({ kind: 'other' });
    expect(await userEngine(request({}), { ...deps, platform: 'darwin' })).toEqual({ kind: 'other' });
    expect(await userEngine(request({}), { ...deps, uid: 0 })).toEqual({ kind: 'other' });
  });

  it('Docker Engine on this host is rootful or rootless as docker info says; a Docker engine in a VM is not judged', async () => {
    expect(await userEngine(request({ engine: 'docker' }), deps)).toEqual({ kind: 'rootful-docker' });
    expect(await userEngine(request({ engine: 'docker' }), { ...deps, identifyDocker: () => docker('docker-engine', true) })).toEqual({ kind: 'rootless-docker' });
    expect(await userEngine(request({ engine: 'docker' }), { ...deps, identifyDocker: () => docker('docker-desktop') })).toEqual({ kind: 'other' });
  });

  it('asks docker only where its answer is needed anyway: a non-root container user, or an agent the engine carries', async () => {
    let asked = 0;
    const counting = { ...deps, identifyDocker: () => ((asked += 1), docker('docker-engine')) };
    expect(await userEngine(request({ engine: 'docker', sshAgent: 'off' }), counting)).toEqual({ kind: 'other' });
    expect(await userEngine(request({ engine: 'docker', sshBridge: 'mount' }), counting)).toEqual({ kind: 'other' });
    expect(asked).toBe(0);
    expect(await userEngine(request({ engine: 'docker', sshAgent: 'off', containerUser: { uid: 1000, gid: 1000 } }), counting)).toEqual({ kind: 'rootful-docker' });
    expect(asked).toBe(1);
  });

  it('a Docker engine that does not answer fails the acquire; a docker missing from PATH is left to its own run', async () => {
    const missing = new SandboxdError('ENGINE_NOT_FOUND', 'no docker');
    expect(await userEngine(request({ engine: 'docker' }), { ...deps, identifyDocker: () => Promise.reject(missing) })).toEqual({ kind: 'other' });
    const down = new SandboxdError('DOCKER_INFO_FAILED', 'no');
    await expect(userEngine(request({ engine: 'docker' }), { ...deps, identifyDocker: () => Promise.reject(down) })).rejects.toBe(down);
  });
});
