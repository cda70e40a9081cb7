import { describe, expect, it } from 'vitest';
import { forPeople } from '../../client/cli/friendly.js';
import { checkAgent, checkConnection, checkDaemon, checkEngines, checkMachineSsh, checkNode, checkService } from '../../client/doctor/checks.js';
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
    expect(checkAgent({ usable: false, reason: 'SSH_AUTH_SOCK is not set in the client environment' })).toMatchObject({ state: 'fail', remedy: expect.stringContaining('ssh-agent') as string });
  });

  it('a daemon that is not running passes while auto-start is on; another version fails', () => {
    expect(checkDaemon({ error: new SandboxdError('DAEMON_NOT_RUNNING', 'x') }, true, '/s/run/sandboxd.sock')).toMatchObject({ state: 'ok', detail: 'not running (socket /s/run/sandboxd.sock); it starts on first use' });
    expect(checkDaemon({ error: new SandboxdError('DAEMON_NOT_RUNNING', 'x') }, false, '/s/run/sandboxd.sock').state).toBe('fail');
  });

  it('one engine missing is skipped, both missing fail', () => {
    expect(checkEngines({ podman: '/usr/bin/podman', docker: null }).map((check) => check.state)).toEqual(['ok', 'skip']);
    expect(checkEngines({ podman: null, docker: null }).map((check) => check.state)).toEqual(['fail', 'fail']);
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
