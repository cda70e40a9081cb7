import { describe, expect, it } from 'vitest';
import { CONNECTION_NOT_CARRIED, NOT_A_CONTAINER, OPTED_OUT, describeFallback, isQuiet } from '../../client/llxprt/fallback.js';
import { llxprtSettings } from '../../client/llxprt/settings.js';
import { fitsLlxprtSpawn } from '../../client/llxprt/spawn-fit.js';

const host = { uid: 1234, gid: 1235, home: '/home/me' };

describe('llxprt\'s settings, read as llxprt reads them', () => {
  it('defaults: auto agent, the image\'s node user', () => {
    expect(llxprtSettings({}, host)).toEqual({ optedOut: false, sshAgent: 'auto', containerUser: { uid: 1000, gid: 1000, home: '/home/node' } });
  });

  it.each([
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'off' }, 'off'],
    [{ SANDBOX_SSH_AGENT: 'off' }, 'off'],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'on' }, 'auto'],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'auto', SANDBOX_SSH_AGENT: 'off' }, 'auto'],
    // llxprt reads `LLXPRT_SANDBOX_SSH_AGENT ?? SANDBOX_SSH_AGENT` and compares with 'off' exactly.
    [{ LLXPRT_SANDBOX_SSH_AGENT: '', SANDBOX_SSH_AGENT: 'off' }, 'auto'],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'OFF' }, 'auto'],
  ])('ssh agent %o → %s (never `on`: llxprt\'s own step decides when sandboxd forwards none)', (env, sshAgent) => {
    expect(llxprtSettings(env, host).sshAgent).toBe(sshAgent);
  });

  it.each([
    [{ SANDBOX_SET_UID_GID: '1' }, undefined, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: ' TRUE ' }, undefined, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: 'yes' }, undefined, { uid: 1000, gid: 1000, home: '/home/node' }],
    [{ SANDBOX_SET_UID_GID: '0' }, undefined, { uid: 1000, gid: 1000, home: '/home/node' }],
    [{}, true, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: 'true' }, false, { uid: 1000, gid: 1000, home: '/home/node' }],
  ])('container user for %o (llxprt\'s own decision: %s)', (env, setUidGid, user) => {
    expect(llxprtSettings(env, host, setUidGid).containerUser).toEqual(user);
  });

  it.each(['0', 'false', 'off', 'NO', ' no '])('LLXPRT_SANDBOXD=%j opts out', (value) => {
    expect(llxprtSettings({ LLXPRT_SANDBOXD: value }, host).optedOut).toBe(true);
  });

  it.each(['1', 'yes', ''])('LLXPRT_SANDBOXD=%j does not', (value) => {
    expect(llxprtSettings({ LLXPRT_SANDBOXD: value }, host).optedOut).toBe(false);
  });
});

describe('what llxprt\'s user is told when llxprt\'s own path runs', () => {
  it('the user\'s own choices are debug lines; everything else is shown, with its remedy', () => {
    expect([OPTED_OUT, NOT_A_CONTAINER, 'DAEMON_NOT_RUNNING'].filter((code) => isQuiet(code as typeof OPTED_OUT))).toHaveLength(3);
    for (const code of ['DAEMON_START_FAILED', 'PROTOCOL_MISMATCH', 'INSECURE_DIRECTORY', 'PODMAN_NO_DEFAULT_CONNECTION', CONNECTION_NOT_CARRIED] as const) {
      expect(isQuiet(code)).toBe(false);
    }
    expect(describeFallback({ code: 'PROTOCOL_MISMATCH', reason: 'the daemon speaks protocol 3', remedy: 'Run `sandboxd restart`.' })).toBe(
      'the daemon speaks protocol 3 (Run `sandboxd restart`.)',
    );
    expect(describeFallback({ code: OPTED_OUT, reason: 'LLXPRT_SANDBOXD is 0', remedy: null })).toBe('LLXPRT_SANDBOXD is 0');
  });
});

describe('a plan fits llxprt\'s spawn: no engine arguments before `run`, no engine environment', () => {
  const plan = (globalArgs: string[], spawnEnv: Record<string, string> = {}) => ({ globalArgs, spawnEnv });

  it.each([
    ['no global arguments', [], {}, 'linux'],
    ['the connection CONTAINER_CONNECTION names', ['--connection', 'dev'], { CONTAINER_CONNECTION: 'dev' }, 'linux'],
    ['on macOS, the default connection the daemon found', ['--connection', 'podman-machine-default'], {}, 'darwin'],
    ['on macOS, the connection CONTAINER_CONNECTION names', ['--connection', 'dev'], { CONTAINER_CONNECTION: 'dev' }, 'darwin'],
  ] as const)('fits: %s', (_name, globalArgs, env, platform) => {
    expect(fitsLlxprtSpawn(plan([...globalArgs]), env, platform)).toBeNull();
  });

  it.each([
    ['a tunnel forced onto a local podman (SANDBOXD_SSH_BRIDGE=tunnel)', ['--connection', 'vm'], {}, 'linux'],
    ['another connection than CONTAINER_CONNECTION', ['--connection', 'vm'], { CONTAINER_CONNECTION: 'dev' }, 'darwin'],
  ] as const)('does not fit: %s', (_name, globalArgs, env, platform) => {
    expect(fitsLlxprtSpawn(plan([...globalArgs]), env, platform)).toEqual({
      code: CONNECTION_NOT_CARRIED,
      reason: 'the plan runs the container with `podman --connection vm run`, a connection llxprt\'s podman would not choose by itself',
      remedy: 'set CONTAINER_CONNECTION=vm, or unset SANDBOXD_SSH_BRIDGE',
    });
  });

  it('does not fit: variables passed through the engine\'s environment', () => {
    expect(fitsLlxprtSpawn(plan([], { TOKEN: 'x' }), {}, 'linux')?.code).toBe('INTERNAL');
  });
});
