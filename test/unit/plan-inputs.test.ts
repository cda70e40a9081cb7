import { describe, expect, it } from 'vitest';
import type { Mount } from '../../shared/contracts/plan.js';
import { containerEnv } from '../../daemon/plan/extras.js';
import { expressibleMounts, mountArgs } from '../../daemon/plan/mount-args.js';
import { workdirMount } from '../../daemon/plan/workdir.js';

const mount = (source: string, extra: Partial<Mount> = {}): Mount => ({ source, target: source, readOnly: false, purpose: 'git config', ...extra });

describe('mountArgs', () => {
  it('uses -v for plain paths and --mount for a path with a colon', () => {
    expect(mountArgs(mount('/a,b', { readOnly: true, relabel: 'z' }))).toEqual(['-v', '/a,b:/a,b:ro,z']);
    expect(mountArgs(mount('/src/a:b', { readOnly: true, relabel: 'z' }))).toEqual([
      '--mount',
      'type=bind,source=/src/a:b,destination=/src/a:b,ro,relabel=shared',
    ]);
    expect(mountArgs(mount('/x', { target: '/home/a:b/.gitconfig' }))).toEqual(['--mount', 'type=bind,source=/x,destination=/home/a:b/.gitconfig']);
  });
});

describe('expressibleMounts', () => {
  it('fails a required mount it cannot express with UNSUPPORTED_PATH naming the path', () => {
    expect(() => expressibleMounts([mount('/src/new\nline', { purpose: 'workdir' })])).toThrow(
      expect.objectContaining({ code: 'UNSUPPORTED_PATH', message: 'the workdir path "/src/new\\nline" contains a newline or another control character, which no engine mount option can carry' }) as Error,
    );
    expect(() => expressibleMounts([mount('/data/a:b,c', { purpose: 'requested mount' })])).toThrow(
      expect.objectContaining({ code: 'UNSUPPORTED_PATH', message: 'the requested mount path "/data/a:b,c" contains both ":" and "," (or a quote), which no engine mount option can carry' }) as Error,
    );
  });

  it('drops an optional one with a warning and keeps the rest', () => {
    const result = expressibleMounts([mount('/ok'), mount('/home/u/odd\tname/.gitconfig'), mount('/fine:colon')]);
    expect(result.mounts.map((m) => m.source)).toEqual(['/ok', '/fine:colon']);
    expect(result.warnings).toEqual(['skipped the git config mount of "/home/u/odd\\tname/.gitconfig": it contains a newline or another control character, which no engine mount option can carry']);
  });
});

describe('workdirMount', () => {
  const base = { repoTop: null, hostHome: '/home/me', allowWide: false, relabel: undefined };

  it.each([
    ['/', 'refusing to mount / read-write into the sandbox: it is the root directory'],
    ['/home/me', 'refusing to mount /home/me read-write into the sandbox: it is your home directory'],
    ['/home', 'refusing to mount /home read-write into the sandbox: it is an ancestor of your home directory /home/me'],
  ])('refuses %s with WORKDIR_TOO_WIDE', (cwd, message) => {
    expect(() => workdirMount({ ...base, cwd })).toThrow(expect.objectContaining({ code: 'WORKDIR_TOO_WIDE', message }) as Error);
  });

  it('allows it when asked, mounts the repository top from a subdirectory, and a sibling like /home/meow', () => {
    expect(workdirMount({ ...base, cwd: '/home/me', allowWide: true }).source).toBe('/home/me');
    expect(workdirMount({ ...base, cwd: '/home/me/src/p/sub', repoTop: '/home/me/src/p' }).source).toBe('/home/me/src/p');
    expect(workdirMount({ ...base, cwd: '/home/meow' }).source).toBe('/home/meow');
  });
});

describe('containerEnv', () => {
  it('passes terminal variables by value and --pass-env values by name only', () => {
    const result = containerEnv({ TERM: 'xterm', COLORTERM: 'truecolor' }, { API_TOKEN: 's3cret' }, new Set(['SSH_AUTH_SOCK']));
    expect(result).toEqual({ env: { TERM: 'xterm', COLORTERM: 'truecolor' }, spawnEnv: { API_TOKEN: 's3cret' }, warnings: [] });
  });

  it('never lets --pass-env override a variable the plan sets, and says so', () => {
    const result = containerEnv({}, { SSH_AUTH_SOCK: '/tmp/host.sock', TERM: 'dumb' }, new Set(['SSH_AUTH_SOCK', 'GIT_CONFIG_GLOBAL']));
    expect(result.spawnEnv).toEqual({ TERM: 'dumb' });
    expect(result.warnings).toEqual(['--pass-env SSH_AUTH_SOCK is ignored: sandboxd sets SSH_AUTH_SOCK in the container itself']);
  });
});
