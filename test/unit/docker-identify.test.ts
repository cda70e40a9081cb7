import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseDockerInfo } from '../../daemon/engines/docker-info.js';
import { identifyEngine, type IdentifyInput } from '../../daemon/engines/identify.js';
import type { HostFacts } from '../../daemon/engines/profile.js';
import { ROOT } from '../helpers.js';

/** `docker info --format '{{json .}}'` of each engine, as the tools print it (test/fixtures/docker-info). */
function fixture(name: string): ReturnType<typeof parseDockerInfo> {
  return parseDockerInfo(readFileSync(path.join(ROOT, 'test/fixtures/docker-info', `${name}.json`), 'utf8'), '', 0);
}

const MAC: HostFacts = { platform: 'darwin', kernelRelease: '24.1.0', rootDirOnHost: false };
/** The lab machine the docker-engine-linux fixture was printed on. */
const LAB_LINUX: HostFacts = { platform: 'linux', kernelRelease: '6.18.44-fc-v669', rootDirOnHost: true };
const OTHER_LINUX: HostFacts = { platform: 'linux', kernelRelease: '6.1.0-26-amd64', rootDirOnHost: true };

function identify(name: string, host: HostFacts, endpoint = 'unix:///var/run/docker.sock', socketStamp: string | null = '11:1700000000000'): ReturnType<typeof identifyEngine> {
  const input: IdentifyInput = { info: fixture(name), endpoint, host, socketStamp };
  return identifyEngine(input);
}

const BUILTIN = '/run/host-services/ssh-auth.sock';

describe('identifyEngine: which engine `docker info` describes (DESIGN §7)', () => {
  it.each([
    ['docker-desktop-macos', MAC, 'docker-desktop', 'Docker Desktop'],
    ['docker-desktop-linux', OTHER_LINUX, 'docker-desktop', 'Docker Desktop'],
    ['orbstack', MAC, 'orbstack', 'OrbStack'],
    ['colima', MAC, 'colima', 'Colima'],
    ['colima-profile', MAC, 'colima', 'Colima'],
    ['rancher-desktop', MAC, 'rancher-desktop', 'Rancher Desktop'],
  ] as const)('%s: %s uses the VM\'s built-in agent socket, verified by a probe', (name, host, kind, label) => {
    const engine = identify(name, host);
    expect(engine.kind).toBe(kind);
    expect(engine.label).toBe(label);
    expect(engine.bridge).toMatchObject({ kind: 'builtin', socket: BUILTIN });
  });

  it('gives each built-in engine its own remedy for a VM without the socket', () => {
    expect(identify('colima', MAC).bridge).toMatchObject({ missingRemedy: expect.stringContaining('colima start --ssh-agent') as string });
    expect(identify('rancher-desktop', MAC).bridge).toMatchObject({ missingRemedy: expect.stringContaining('Rancher Desktop forwards no SSH agent') as string });
    expect(identify('docker-desktop-macos', MAC).bridge).toMatchObject({ missingRemedy: expect.stringContaining('Update Docker Desktop') as string });
  });

  it('a built-in socket serves whatever the endpoint is, even tcp://', () => {
    expect(identify('docker-desktop-linux', OTHER_LINUX, 'tcp://127.0.0.1:2375').bridge.kind).toBe('builtin');
  });

  it('Podman machine behind the docker CLI: the Podman tunnel; a local Podman service on Linux: the local relay', () => {
    expect(identify('podman-machine-macos', MAC)).toMatchObject({ kind: 'podman', label: 'Podman', bridge: { kind: 'podman-tunnel' } });
    expect(identify('podman-linux-service', LAB_LINUX)).toMatchObject({ kind: 'podman', bridge: { kind: 'relay' } });
  });

  it('Podman invents a new ID for every `docker info`: its instance does not depend on it', () => {
    const first = identifyEngine({ info: { ...fixture('podman-machine-macos'), ID: 'a' }, endpoint: 'unix:///p.sock', host: MAC, socketStamp: '1:2' });
    const second = identifyEngine({ info: { ...fixture('podman-machine-macos'), ID: 'b' }, endpoint: 'unix:///p.sock', host: MAC, socketStamp: '1:2' });
    expect(first.instance).toBe(second.instance);
  });

  it('plain Docker Engine sharing this host\'s kernel and files: the local relay', () => {
    expect(identify('docker-engine-linux', LAB_LINUX)).toMatchObject({ kind: 'docker-engine', label: 'Docker Engine', bridge: { kind: 'relay' } });
  });

  it('an engine that is not on this host and names no product is unknown, reported by name, skipped with a remedy', () => {
    const engine = identify('docker-engine-remote', OTHER_LINUX);
    expect(engine.kind).toBe('unknown');
    expect(engine.label).toBe('build-01 (Ubuntu 22.04.5 LTS, server 27.3.1)');
    expect(engine.bridge).toEqual({
      kind: 'skip',
      reason: 'the Docker engine at unix:///var/run/docker.sock is build-01 (Ubuntu 22.04.5 LTS, server 27.3.1): it does not share this host\'s kernel and offers no agent socket sandboxd knows',
      remedy: 'Use Docker Desktop, OrbStack, `colima start --ssh-agent`, a Podman machine or an ssh:// DOCKER_HOST, or pass --ssh-agent off.',
    });
    // Its DockerRootDir not on this host is enough to refuse the relay, whatever the kernel.
    expect(identify('docker-engine-linux', { ...LAB_LINUX, rootDirOnHost: false }).kind).toBe('unknown');
    expect(identify('docker-engine-linux', { ...LAB_LINUX, platform: 'darwin' }).kind).toBe('unknown');
  });

  it('DOCKER_HOST=ssh://…: an ssh -R tunnel into that host', () => {
    expect(identify('docker-engine-remote', OTHER_LINUX, 'ssh://me@build-01:2222').bridge).toEqual({ kind: 'ssh-tunnel', uri: 'ssh://me@build-01:2222' });
    expect(identify('podman-machine-macos', MAC, 'ssh://core@127.0.0.1:50123/run/podman/podman.sock').bridge.kind).toBe('ssh-tunnel');
  });

  it('tcp:// hosts are skipped with the reason and the ssh:// remedy', () => {
    expect(identify('docker-engine-remote', OTHER_LINUX, 'tcp://10.0.0.5:2376').bridge).toEqual({
      kind: 'skip',
      reason: 'the Docker engine is reached at tcp://10.0.0.5:2376, another machine sandboxd has no way into',
      remedy: 'Reach it over ssh (`DOCKER_HOST=ssh://user@host`, or a docker context with an ssh:// host) so sandboxd can tunnel the agent, or pass --ssh-agent off.',
    });
  });

  it('the instance changes when the engine restarts (a new socket) and differs between engines with one ID', () => {
    const before = identify('docker-desktop-macos', MAC, 'unix:///d.sock', '5:100');
    expect(identify('docker-desktop-macos', MAC, 'unix:///d.sock', '5:100').instance).toBe(before.instance);
    expect(identify('docker-desktop-macos', MAC, 'unix:///d.sock', '9:200').instance).not.toBe(before.instance);
    expect(identify('docker-desktop-macos', MAC, 'unix:///other.sock', '5:100').instance).not.toBe(before.instance);
    expect(before.instance).toMatch(/^eng_[0-9a-f]{16}$/);
  });
});

describe('parseDockerInfo', () => {
  const read = (name: string): string => readFileSync(path.join(ROOT, 'test/fixtures/docker-info', `${name}.json`), 'utf8');

  it('an engine that is down (docker CLI 28 exits 1 with empty JSON; 20.10 exits 0 with ServerErrors) is DOCKER_INFO_FAILED', () => {
    const message = 'Cannot connect to the Docker daemon at unix:///run/sbx-cap.sock. Is the docker daemon running?';
    expect(() => parseDockerInfo(read('engine-down-cli28'), message, 1)).toThrow(expect.objectContaining({ code: 'DOCKER_INFO_FAILED', message: `the Docker engine did not answer \`docker info\`: ${message}` }));
    expect(() => parseDockerInfo(read('engine-down-cli20'), '', 0)).toThrow(expect.objectContaining({ code: 'DOCKER_INFO_FAILED', message: `the Docker engine did not answer \`docker info\`: ${message}` }));
  });

  it('output that is not JSON, or JSON of another shape, is DOCKER_INFO_FAILED saying so', () => {
    expect(() => parseDockerInfo('', 'context "nope": context not found', 1)).toThrow(expect.objectContaining({ code: 'DOCKER_INFO_FAILED', message: '`docker info` gave no engine description: context "nope": context not found' }));
    expect(() => parseDockerInfo('hello', '', 0)).toThrow(expect.objectContaining({ message: '`docker info` gave no engine description: not JSON: hello' }));
    expect(() => parseDockerInfo('{"Name": 5}', '', 0)).toThrow(expect.objectContaining({ code: 'DOCKER_INFO_FAILED', message: expect.stringContaining('printed JSON of an unexpected shape') as string }));
  });
});
