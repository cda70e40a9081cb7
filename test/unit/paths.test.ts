import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { assertSocketPathFits, resolvePaths } from '../../shared/paths.js';

describe('resolvePaths (DESIGN §3)', () => {
  it('uses XDG dirs on Linux', () => {
    const paths = resolvePaths({ platform: 'linux', env: { XDG_RUNTIME_DIR: '/run/user/1000', XDG_STATE_HOME: '/s' }, uid: 1000, home: '/home/u' });
    expect(paths.socketPath).toBe('/run/user/1000/sandboxd/sandboxd.sock');
    expect(paths.statePath).toBe('/s/sandboxd/state.json');
    expect(paths.logDir).toBe('/s/sandboxd/log');
  });

  it('falls back to a runtime dir under the home (which no other user can create first) without XDG variables', () => {
    const paths = resolvePaths({ platform: 'linux', env: { XDG_RUNTIME_DIR: '' }, uid: 501, home: '/home/u' });
    expect(paths.runtimeDir).toBe('/home/u/.local/state/sandboxd/run');
    expect(paths.socketPath).toBe('/home/u/.local/state/sandboxd/run/sandboxd.sock');
    expect(paths.stateDir).toBe('/home/u/.local/state/sandboxd');
    const xdg = resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: '/s' }, uid: 501, home: '/home/u' });
    expect(xdg.runtimeDir).toBe('/s/sandboxd/run');
  });

  it('falls back to /tmp/sandboxd-<uid> only when the socket under the home would exceed 107 bytes', () => {
    // '/sandboxd/run/sandboxd.sock' is 27 bytes: a 80-byte state dir fits exactly, 81 does not.
    const fits = `/${'a'.repeat(79)}`;
    expect(resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: fits }, uid: 501, home: '/h' }).socketPath).toHaveLength(107);
    const tooLong = `/${'a'.repeat(80)}`;
    expect(resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: tooLong }, uid: 501, home: '/h' }).runtimeDir).toBe('/tmp/sandboxd-501');
  });

  it('keeps the lock, its guard, the pid file and the spawn lock in the runtime dir', () => {
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: '/r' }, uid: 1, home: '/h' });
    expect([paths.lockPath, paths.lockGuardPath, paths.pidPath, paths.spawnLockPath]).toEqual([
      '/r/daemon.lock',
      '/r/daemon.lock.guard',
      '/r/daemon.pid',
      '/r/spawn.lock',
    ]);
  });

  it('uses Application Support and Logs on macOS, ignoring XDG', () => {
    const paths = resolvePaths({ platform: 'darwin', env: { XDG_RUNTIME_DIR: '/x' }, uid: 501, home: '/Users/u' });
    expect(paths.socketPath).toBe('/Users/u/Library/Application Support/sandboxd/sandboxd.sock');
    expect(paths.statePath).toBe('/Users/u/Library/Application Support/sandboxd/state.json');
    expect(paths.logPath).toBe('/Users/u/Library/Logs/sandboxd/sandboxd.log');
  });

  it('honours the SANDBOXD_* overrides on both platforms', () => {
    for (const platform of ['linux', 'darwin'] as const) {
      const paths = resolvePaths({
        platform,
        env: { SANDBOXD_RUNTIME_DIR: '/r', SANDBOXD_STATE_DIR: '/s', SANDBOXD_LOG_DIR: '/l' },
        uid: 1,
        home: '/h',
      });
      expect([paths.socketPath, paths.statePath, paths.logPath]).toEqual(['/r/sandboxd.sock', '/s/state.json', '/l/sandboxd.log']);
    }
  });
});

describe('assertSocketPathFits', () => {
  it('accepts 107 bytes on Linux and refuses 104 on macOS, naming the path and the variable', () => {
    const path107 = `/${'a'.repeat(106)}`;
    expect(() => {
      assertSocketPathFits(path107, 'linux');
    }).not.toThrow();
    const path104 = `/${'a'.repeat(103)}`;
    try {
      assertSocketPathFits(path104, 'darwin');
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(SandboxdError);
      expect((error as SandboxdError).code).toBe('SOCKET_PATH_TOO_LONG');
      expect((error as SandboxdError).message).toBe(`socket path ${path104} is 104 bytes; darwin allows 103`);
      expect((error as SandboxdError).remedy).toContain('SANDBOXD_RUNTIME_DIR');
    }
  });

  it('counts bytes, not characters', () => {
    expect(() => {
      assertSocketPathFits(`/${'é'.repeat(54)}`, 'linux');
    }).toThrow(/109 bytes/);
  });
});
