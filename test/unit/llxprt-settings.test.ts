import { describe, expect, it } from 'vitest';
import { FALLBACK_CODES, fallsBack } from '../../client/llxprt/fallback.js';
import { llxprtSettings, parseLlxprtMounts } from '../../client/llxprt/settings.js';
import { ERROR_SPECS, type ErrorCode } from '../../shared/errors.js';

const existing = new Set(['/data', '/home/me/notes', '/run/user/1000/llxprt/cred.sock']);
const host = { uid: 1234, gid: 1235, home: '/home/me', exists: (file: string) => existing.has(file) };

describe('llxprt\'s settings, read as llxprt reads them', () => {
  it('defaults: auto agent, the image\'s node user, nothing else', () => {
    expect(llxprtSettings({}, host)).toEqual({
      optedOut: false,
      sshAgent: 'auto',
      warnIfAgentSkipped: false,
      containerUser: { uid: 1000, gid: 1000, home: '/home/node' },
      mounts: [],
      sockets: [],
      warnings: [],
    });
  });

  it.each([
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'off' }, 'off', false],
    [{ SANDBOX_SSH_AGENT: 'off' }, 'off', false],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'on' }, 'auto', true],
    [{ SANDBOX_SSH_AGENT: 'ON' }, 'auto', true],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'auto', SANDBOX_SSH_AGENT: 'off' }, 'auto', false],
    [{ LLXPRT_SANDBOX_SSH_AGENT: '', SANDBOX_SSH_AGENT: 'off' }, 'off', false],
    [{ LLXPRT_SANDBOX_SSH_AGENT: 'sometimes' }, 'auto', false],
  ])('ssh agent %o → %s (never `on`: llxprt only warns)', (env, sshAgent, warn) => {
    const settings = llxprtSettings(env, host);
    expect(settings.sshAgent).toBe(sshAgent);
    expect(settings.warnIfAgentSkipped).toBe(warn);
  });

  it.each([
    [{ SANDBOX_SET_UID_GID: '1' }, undefined, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: 'true' }, undefined, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: '0' }, undefined, { uid: 1000, gid: 1000, home: '/home/node' }],
    [{}, true, { uid: 1234, gid: 1235, home: '/home/me' }],
    [{ SANDBOX_SET_UID_GID: 'true' }, false, { uid: 1000, gid: 1000, home: '/home/node' }],
  ])('container user for %o (llxprt\'s own decision: %s)', (env, setUidGid, user) => {
    expect(llxprtSettings(env, host, setUidGid).containerUser).toEqual(user);
  });

  it.each(['0', 'false', 'off', 'NO'])('LLXPRT_SANDBOXD=%s opts out', (value) => {
    expect(llxprtSettings({ LLXPRT_SANDBOXD: value }, host).optedOut).toBe(true);
  });

  it('LLXPRT_CREDENTIAL_SOCKET becomes the credential-proxy socket named in the same variable', () => {
    expect(llxprtSettings({ LLXPRT_CREDENTIAL_SOCKET: '/run/user/1000/llxprt/cred.sock' }, host).sockets).toEqual([
      { name: 'credential-proxy', hostPath: '/run/user/1000/llxprt/cred.sock', env: 'LLXPRT_CREDENTIAL_SOCKET' },
    ]);
    const relative = llxprtSettings({ LLXPRT_CREDENTIAL_SOCKET: 'cred.sock' }, host);
    expect(relative.sockets).toEqual([]);
    expect(relative.warnings).toEqual(['LLXPRT_CREDENTIAL_SOCKET is cred.sock, not an absolute path; the credential proxy is not forwarded']);
  });

  it('LLXPRT_SANDBOX_MOUNTS wins over SANDBOX_MOUNTS', () => {
    expect(llxprtSettings({ LLXPRT_SANDBOX_MOUNTS: '/data', SANDBOX_MOUNTS: '/home/me/notes' }, host).mounts).toEqual(['/data:/data:ro']);
    expect(llxprtSettings({ SANDBOX_MOUNTS: '/home/me/notes' }, host).mounts).toEqual(['/home/me/notes:/home/me/notes:ro']);
  });
});

describe('llxprt\'s mount grammar: from[:to][:ro|rw], read-only by default', () => {
  it.each([
    ['/data', ['/data:/data:ro']],
    ['/data:rw', ['/data:/data:rw']],
    ['/data:/mnt/data', ['/data:/mnt/data:ro']],
    ['/data:/mnt/data:rw', ['/data:/mnt/data:rw']],
    [' /data:/a , /home/me/notes:ro ,', ['/data:/a:ro', '/home/me/notes:/home/me/notes:ro']],
    ['', []],
  ])('%j', (value, mounts) => {
    expect(parseLlxprtMounts(value, host)).toEqual({ mounts, warnings: [] });
  });

  it.each([
    ['data', 'sandbox mount "data" is not from[:to][:ro|rw] with absolute paths; it is left out'],
    ['/data:mnt', 'sandbox mount "/data:mnt" is not from[:to][:ro|rw] with absolute paths; it is left out'],
    ['/data:/a:/b', 'sandbox mount "/data:/a:/b" is not from[:to][:ro|rw] with absolute paths; it is left out'],
    ['/missing:/m', 'sandbox mount "/missing:/m" names /missing, which does not exist; it is left out'],
  ])('leaves out %j with a warning', (value, warning) => {
    expect(parseLlxprtMounts(`${value},/data`, host)).toEqual({ mounts: ['/data:/data:ro'], warnings: [warning] });
  });
});

describe('which failures fall back to llxprt\'s own path', () => {
  const fallBack: ErrorCode[] = ['DAEMON_NOT_RUNNING', 'DAEMON_START_FAILED', 'PROTOCOL_MISMATCH', 'DAEMON_TIMEOUT', 'INVALID_RESPONSE', 'RUN_ARGS_UNPARSABLE', 'SOCKET_PATH_TOO_LONG', 'INTERNAL', 'HEADERS_TOO_LARGE', 'REQUEST_TIMEOUT'];
  const fail: ErrorCode[] = ['PODMAN_NOT_FOUND', 'PODMAN_NO_DEFAULT_CONNECTION', 'PODMAN_CONNECTION_NOT_FOUND', 'TUNNEL_UNREACHABLE', 'TUNNEL_AUTH_FAILED', 'INVALID_MOUNT', 'UNSUPPORTED_PATH', 'ENGINE_NOT_FOUND'];

  it.each(fallBack)('%s falls back', (code) => {
    expect(fallsBack(code)).toBe(true);
  });

  it.each(fail)('%s fails the launch', (code) => {
    expect(fallsBack(code)).toBe(false);
  });

  it('names only codes that exist', () => {
    for (const code of FALLBACK_CODES) expect(Object.keys(ERROR_SPECS)).toContain(code);
  });
});
