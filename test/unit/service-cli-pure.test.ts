import { describe, expect, it } from 'vitest';
import { forPeople } from '../../client/cli/friendly.js';
import { checkAgent, checkConnection, checkContainer, checkDaemon, checkEngines, checkMachineSsh, checkNode, checkService } from '../../client/doctor/checks.js';
import { engineSaid } from '../../client/doctor/container-check.js';
import { formatRecord, parseDuration, parseLine } from '../../client/logs/format.js';
import { SandboxdError } from '../../shared/errors.js';

describe('logs, readable for people', () => {
  it('formats a pino line as time, level, module, id, message and the other fields', () => {
    const record = parseLine('{"level":40,"time":"2025-01-02T03:04:05.678Z","pid":9,"module":"tunnel","tunnelId":"tun_abc123","restarts":2,"msg":"ssh exited","err":{"message":"boom x"}}');
    expect(record).not.toBeNull();
    expect(formatRecord(record ?? { time: '', level: 0, msg: '' })).toBe('2025-01-02T03:04:05.678Z WARN  tunnel   tun_abc123  ssh exited  restarts=2 err="boom x"');
    expect(parseLine('not json')).toBeNull();
    expect(parseLine('{"msg":"no time"}')).toBeNull();
  });

  it('reads --since durations and names the option when one is wrong', () => {
    expect(parseDuration('90s', '--since')).toBe(90_000);
    expect(parseDuration('2h', '--since')).toBe(7_200_000);
    expect(() => parseDuration('yesterday', '--since')).toThrow(
      expect.objectContaining({ code: 'USAGE', message: '--since must be a duration like 90s, 10m, 2h or 1d, got "yesterday"', remedy: 'For example --since 10m.' }) as Error,
    );
  });
});

describe('schema wording never reaches a person', () => {
  it('names the option and says why', () => {
    const error = forPeople(new SandboxdError('BAD_REQUEST', 'invalid session request: label: Too big: expected string to have <=100 characters; mounts.2: Too small: expected string to have >=1 characters'), 'plan');
    expect(error.message).toBe('--label is longer than 100 characters; --mount is empty');
    expect(error.remedy).toBe("Fix that value; see 'sandboxd plan --help'.");
    const plain = forPeople(new SandboxdError('BAD_REQUEST', 'invalid session request: label: is longer than 100 characters; mounts.2: is empty'), 'run');
    expect(plain.message).toBe('--label is longer than 100 characters; --mount is empty');
    const other = new SandboxdError('TUNNEL_FAILED', 'x');
    expect(forPeople(other, 'plan')).toBe(other);
  });
});

describe('doctor checks', () => {
  it('node 20.19 and newer pass', () => {
    expect(checkNode('20.19.0').state).toBe('ok');
    expect(checkNode('20.18.1')).toMatchObject({ state: 'fail', remedy: 'Install Node 20.19 or newer.' });
  });

  it('an agent without keys fails with the 1Password remedy; no agent fails with the agent remedy', () => {
    expect(checkAgent({ usable: true, realpath: '/a.sock', keys: 0 })).toMatchObject({ state: 'fail', detail: '/a.sock answers but holds no keys', remedy: expect.stringContaining('IdentityAgent') as string });
    expect(checkAgent({ usable: true, realpath: '/a.sock', keys: 2 })).toMatchObject({ state: 'ok', detail: '/a.sock: 2 keys' });
    // Doctor's remedy works in doctor's shell: no `run` option in it.
    const none = checkAgent({ usable: false, reason: 'SSH_AUTH_SOCK is not set in the client environment' });
    expect(none).toMatchObject({ state: 'fail', remedy: 'Start an agent with your key in this shell: `eval "$(ssh-agent -s)" && ssh-add`.' });
    expect(none.remedy).not.toContain('--ssh-agent');
  });

  it('a daemon that is not running passes while auto-start is on; another version fails', () => {
    expect(checkDaemon({ error: new SandboxdError('DAEMON_NOT_RUNNING', 'x') }, true, '/s/run/sandboxd.sock')).toMatchObject({ state: 'ok', detail: 'not running (socket /s/run/sandboxd.sock); it starts on first use' });
    expect(checkDaemon({ error: new SandboxdError('DAEMON_NOT_RUNNING', 'x') }, false, '/s/run/sandboxd.sock').state).toBe('fail');
  });

  it('one engine missing is skipped, both missing fail; of two, the one `run` does not use is skipped', () => {
    const podman = { engine: 'podman', why: 'the only engine on PATH' } as const;
    expect(checkEngines({ podman: '/usr/bin/podman', docker: null }, podman).map((check) => check.state)).toEqual(['ok', 'skip']);
    expect(checkEngines({ podman: null, docker: null }, null).map((check) => check.state)).toEqual(['fail', 'fail']);
    const both = checkEngines({ podman: '/usr/bin/podman', docker: '/usr/bin/docker' }, { engine: 'podman', why: 'the one that answers; docker does not' });
    expect(both.map((check) => check.state)).toEqual(['ok', 'skip']);
    expect(both[1]?.detail).toBe('/usr/bin/docker, not the engine `run` uses (the one that answers; docker does not)');
  });

  it('the container check names the first step that failed once, with a remedy for that step', () => {
    expect(checkContainer('podman', { step: 'ok', image: 'sandboxd-relay:1' }, 'linux').state).toBe('ok');
    expect(checkContainer(null, null, 'linux').state).toBe('skip');
    const noServer = checkContainer('docker', { step: 'engine', reason: 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' }, 'linux');
    expect(noServer).toMatchObject({ state: 'fail', detail: "docker's server does not answer: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" });
    expect(noServer.remedy).toContain('sudo systemctl start docker');
    expect(checkContainer('docker', { step: 'engine', reason: 'x' }, 'darwin').remedy).toContain('Docker Desktop');
    const network = checkContainer('podman', { step: 'network', reason: 'Error: /usr/bin/slirp4netns failed', command: 'podman run --rm x' }, 'linux');
    expect(network.detail).toBe("podman starts containers with no network, but not with its default network: Error: /usr/bin/slirp4netns failed");
    expect(network.remedy).toContain('netns = "none"');
    expect(checkContainer('podman', { step: 'run', reason: 'Error: OCI runtime error', command: 'podman run --rm --network none x' }, 'linux').remedy).toBe('Run `podman run --rm --network none x` to see the whole error.');
  });

  it('an engine\'s error is one line: podman\'s folded helper output unfolded and its warnings dropped, docker\'s --help line skipped', () => {
    const slirp = 'Error: /usr/bin/slirp4netns failed: "open(\\"/dev/net/tun\\"): Permission denied\\nWARNING: Support for seccomp is experimental\\nchild failed(1)\\nWARNING: Support for seccomp is experimental\\n"';
    expect(engineSaid(`time="x" level=warning msg="/ is not a shared mount"\n${slirp}\n`, 'none')).toBe('Error: /usr/bin/slirp4netns failed: "open("/dev/net/tun"): Permission denied; child failed(1)');
    expect(engineSaid("docker: Error response from daemon: boom.\nRun 'docker run --help' for more information\n", 'none')).toBe('docker: Error response from daemon: boom.');
    expect(engineSaid('', 'exit 3')).toBe('exit 3');
  });

  it('a connection and its machine fail only where Podman needs them', () => {
    const down = { exitCode: 255, error: new SandboxdError('TUNNEL_UNREACHABLE', 'the machine behind connection lab is unreachable: Connection refused') };
    expect(checkMachineSsh(down, 'lab', true)).toMatchObject({ state: 'fail', detail: down.error.message });
    expect(checkMachineSsh(down, 'lab', false).state).toBe('skip');
    expect(checkConnection({ error: new SandboxdError('PODMAN_NO_CONNECTIONS', 'none') }, false).state).toBe('skip');
    expect(checkConnection({ error: new SandboxdError('PODMAN_NO_CONNECTIONS', 'none') }, true).state).toBe('fail');
  });

  it('a service installed but not loaded fails; not installed is skipped', () => {
    const base = { kind: 'systemd', files: ['/c/sandboxd.service'], installed: true, unreachable: null, programProblem: null, loaded: false, lastExit: null };
    expect(checkService({ ...base, installed: false })).toMatchObject({ state: 'skip', detail: expect.stringContaining('`sandboxd install` starts it at login') as string });
    expect(checkService(base)).toMatchObject({ state: 'fail', remedy: 'Run `sandboxd install` again.' });
    expect(checkService({ ...base, loaded: true, lastExit: 'active, last exit status 0 (success)' })).toMatchObject({
      state: 'ok',
      detail: 'installed and loaded (systemd: sandboxd.service); active, last exit status 0 (success)',
    });
  });

  it('never offers `sandboxd install` where the service manager cannot be reached; names a missing program', () => {
    const unreachable = { reason: 'systemd cannot be reached from this shell: `systemctl --user show-environment` failed: Failed to connect to bus: No medium found', remedy: 'Enable lingering …' };
    const base = { kind: 'systemd', files: ['/c/sandboxd.service'], installed: false, unreachable, programProblem: null, loaded: false, lastExit: null };
    const notInstalled = checkService(base);
    expect(notInstalled).toMatchObject({ state: 'skip', remedy: null });
    expect(notInstalled.detail).not.toContain('`sandboxd install` starts');
    expect(checkService({ ...base, installed: true, programProblem: 'the service\'s program /opt/homebrew/Cellar/node/22.1.0/bin/node is missing' })).toMatchObject({
      state: 'fail',
      remedy: 'Enable lingering …',
    });
    expect(checkService({ ...base, unreachable: null, installed: true, programProblem: 'the service\'s program /x/node is missing' })).toMatchObject({
      state: 'fail',
      remedy: expect.stringContaining('Run `sandboxd install` again') as string,
    });
  });
});
