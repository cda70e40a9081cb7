import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { assertSocketPathFits, otherLayoutSockets, resolvePaths, resolveSocketPath, type PathInputs } from '../../shared/paths.js';

describe('resolvePaths (DESIGN §3)', () => {
  it('puts the socket beside the state on Linux, whatever XDG_RUNTIME_DIR the shell has', () => {
    const login = resolvePaths({ platform: 'linux', env: { XDG_RUNTIME_DIR: '/run/user/1000', XDG_STATE_HOME: '/s' }, uid: 1000, home: '/home/u' });
    expect(login.socketPath).toBe('/s/sandboxd/run/sandboxd.sock');
    expect(login.statePath).toBe('/s/sandboxd/state.json');
    expect(login.logDir).toBe('/s/sandboxd/log');
    // `su -`, `sudo -u`, cron: no XDG_RUNTIME_DIR, the same daemon.
    for (const env of [{}, { XDG_RUNTIME_DIR: '' }, { XDG_RUNTIME_DIR: '/run/user/1000' }]) {
      const paths = resolvePaths({ platform: 'linux', env, uid: 1000, home: '/home/u' });
      expect(paths.runtimeDir).toBe('/home/u/.local/state/sandboxd/run');
      expect(paths.socketPath).toBe('/home/u/.local/state/sandboxd/run/sandboxd.sock');
      expect(paths.stateDir).toBe('/home/u/.local/state/sandboxd');
    }
  });

  it('derives the runtime dir from SANDBOXD_STATE_DIR when only that is set', () => {
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_STATE_DIR: '/data/sbx' }, uid: 1, home: '/h' });
    expect(paths.socketPath).toBe('/data/sbx/run/sandboxd.sock');
  });

  it('falls back to /tmp, named for the uid and the state dir, only when the socket beside the state would exceed 107 bytes', () => {
    // '/sandboxd/run/sandboxd.sock' is 27 bytes: a 80-byte state home fits exactly, 81 does not.
    const fits = `/${'a'.repeat(79)}`;
    expect(resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: fits }, uid: 501, home: '/h' }).socketPath).toHaveLength(107);
    const tooLong = `/${'a'.repeat(80)}`;
    const one = resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: tooLong }, uid: 501, home: '/h' }).runtimeDir;
    expect(one).toMatch(/^\/tmp\/sandboxd-501-[0-9a-f]{8}$/);
    expect(resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: tooLong }, uid: 501, home: '/elsewhere' }).runtimeDir).toBe(one);
    const other = resolvePaths({ platform: 'linux', env: { XDG_STATE_HOME: `/${'b'.repeat(80)}` }, uid: 501, home: '/h' }).runtimeDir;
    expect(other).not.toBe(one);
  });

  it('keeps the lock, its guard, the pid file and the spawn lock beside the state they guard', () => {
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: '/r', SANDBOXD_STATE_DIR: '/s' }, uid: 1, home: '/h' });
    expect([paths.lockPath, paths.lockGuardPath, paths.pidPath, paths.spawnLockPath]).toEqual([
      '/s/daemon.lock',
      '/s/daemon.lock.guard',
      '/s/daemon.pid',
      '/s/spawn.lock',
    ]);
  });

  it('names the sockets of earlier layouts that status and doctor look at', () => {
    const inputs = { platform: 'linux' as const, env: { XDG_RUNTIME_DIR: '/run/user/1000' }, uid: 1000, home: '/home/u' };
    expect(otherLayoutSockets(inputs, resolvePaths(inputs))).toEqual([
      '/run/user/1000/sandboxd/sandboxd.sock',
      '/tmp/sandboxd-1000/sandboxd.sock',
    ]);
    const suShell = { ...inputs, env: {} };
    expect(otherLayoutSockets(suShell, resolvePaths(suShell))).toEqual(['/run/user/1000/sandboxd/sandboxd.sock', '/tmp/sandboxd-1000/sandboxd.sock']);
    const explicit = { ...inputs, env: { SANDBOXD_RUNTIME_DIR: '/run/user/1000/sandboxd' } };
    expect(otherLayoutSockets(explicit, resolvePaths(explicit))).toEqual(['/tmp/sandboxd-1000/sandboxd.sock']);
    const mac = { ...inputs, platform: 'darwin' as const };
    expect(otherLayoutSockets(mac, resolvePaths(mac))).toEqual([]);
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

describe('resolveSocketPath', () => {
  it('finds the socket resolvePaths names, for every layout and override', () => {
    const envs: PathInputs['env'][] = [
      {},
      { XDG_RUNTIME_DIR: '/run/user/1000', XDG_STATE_HOME: '/s' },
      { XDG_STATE_HOME: '' },
      { XDG_STATE_HOME: `/${'a'.repeat(79)}` },
      { XDG_STATE_HOME: `/${'a'.repeat(80)}` },
      { SANDBOXD_STATE_DIR: '/data/sbx' },
      { SANDBOXD_STATE_DIR: 'relative/state' },
      { SANDBOXD_STATE_DIR: `/${'c'.repeat(120)}` },
      { SANDBOXD_RUNTIME_DIR: '/r' },
      { SANDBOXD_RUNTIME_DIR: 'r/../rt/', SANDBOXD_STATE_DIR: '/s' },
      { SANDBOXD_RUNTIME_DIR: '', SANDBOXD_STATE_DIR: '' },
    ];
    for (const platform of ['linux', 'darwin'] as const) {
      for (const env of envs) {
        const inputs = { platform, env, uid: 1000, home: '/home/u' };
        expect(resolveSocketPath(inputs)).toBe(resolvePaths(inputs).socketPath);
      }
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
