import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { environmentLine, execWord, parseExecStart, renderUnits, systemdManager, systemdUnitDir } from '../../client/service/systemd.js';
import type { CommandRunner, ServiceSpec } from '../../client/service/service.js';
import { assertReachable } from '../../client/service/manager.js';
import type { SandboxdError } from '../../shared/errors.js';
import { readTemplate } from '../../client/service/templates.js';
import { inheritedListenFd, scrubActivationEnv } from '../../daemon/lifecycle/socket-activation.js';
import { resolvePaths } from '../../shared/paths.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const templates = (): { service: string; socket: string } => ({ service: readTemplate('systemd', 'sandboxd.service'), socket: readTemplate('systemd', 'sandboxd.socket') });
const hasAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;

function spec(): ServiceSpec {
  return {
    node: '/home/me/.nvm/versions/node/v22.1.0/bin/node',
    entry: '/home/me/my tools/sandboxd/dist/client/cli/main.js',
    env: { PATH: '/usr/bin:/bin', SANDBOXD_LOG_DIR: '/home/me/100% logs' },
    paths: resolvePaths({ platform: 'linux', env: { XDG_RUNTIME_DIR: '/run/user/1000' }, uid: 1000, home: '/home/me' }),
  };
}

describe('systemd user units', () => {
  it('render ExecStart with absolute, quoted paths, the install-time environment and the client\'s socket path', () => {
    const units = renderUnits(templates(), spec());
    expect(units.service).toContain('ExecStart=/home/me/.nvm/versions/node/v22.1.0/bin/node "/home/me/my tools/sandboxd/dist/client/cli/main.js" daemon --service-manager systemd\n');
    expect(units.service).toContain('Environment="PATH=/usr/bin:/bin"\nEnvironment="SANDBOXD_LOG_DIR=/home/me/100%% logs"\n');
    expect(units.service).toContain('Restart=on-failure');
    expect(units.socket).toContain('ListenStream=/home/me/.local/state/sandboxd/run/sandboxd.sock\n');
    expect(units.socket).toContain('SocketMode=0600\nDirectoryMode=0700\n');
    expect(units.service).not.toMatch(/\{\{|\}\}/);
  });

  it('quotes what systemd would otherwise expand or split', () => {
    expect(execWord('/a b/$HOME%h')).toBe('"/a b/$$HOME%%h"');
    expect(execWord('/plain')).toBe('/plain');
    expect(environmentLine('X', 'a "b" $c %d')).toBe('Environment="X=a \\"b\\" $c %%d"');
  });

  it('reads back the command it wrote, whatever the paths hold', () => {
    const tricky = { ...spec(), node: '/opt/o\'neil/"node" $1 %h\\x', entry: '/a b/100% main.js' };
    expect(parseExecStart(renderUnits(templates(), tricky).service)).toEqual([tricky.node, tricky.entry, 'daemon', '--service-manager', 'systemd']);
  });

  it('refuses a control character in every value it renders: a newline would add a directive', () => {
    const base = spec();
    const injected = '/run/x\nExecStartPre=/bin/touch /tmp/pwned';
    const cases: [string, ServiceSpec][] = [
      ['SANDBOXD_RUNTIME_DIR (environment)', { ...base, env: { ...base.env, SANDBOXD_RUNTIME_DIR: injected } }],
      ['SANDBOXD_RUNTIME_DIR (socket)', { ...base, paths: resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: injected }, uid: 1000, home: '/home/me' }) }],
      ['node', { ...base, node: '/usr/bin/node\rExecStartPre=/x' }],
      ['entry', { ...base, entry: '/opt/main.js\t' }],
      ['DEL', { ...base, env: { ...base.env, SANDBOXD_LOG_DIR: '/l\u007f' } }],
    ];
    for (const [what, bad] of cases) {
      expect(() => renderUnits(templates(), bad), what).toThrow(expect.objectContaining({ code: 'SERVICE_VALUE_UNSUPPORTED' }) as Error);
    }
  });

  it.skipIf(!hasAnalyze && process.env.CI === undefined)('pass `systemd-analyze verify` with the worst values a path may hold, and carry no directive beyond the template\'s', () => {
    const dir = mkdtempSync('/tmp/sbx-units-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    // verify needs an ExecStart binary that exists and a runtime dir for the user manager.
    const runtime = path.join(dir, 'run');
    mkdirSync(runtime, { mode: 0o700 });
    const worst = { PATH: '/usr/bin:/bin', SANDBOXD_RUNTIME_DIR: '/r/a "b" \\ $c %h \';', SANDBOXD_LOG_DIR: '/l/ExecStartPre=/bin/true' };
    const units = renderUnits(templates(), { ...spec(), env: worst, node: process.execPath, entry: path.join(dir, 'main "x" %i.js') });
    const unitDir = path.join(dir, 'user');
    mkdirSync(unitDir);
    writeFileSync(path.join(unitDir, 'sandboxd.service'), units.service);
    writeFileSync(path.join(unitDir, 'sandboxd.socket'), units.socket);
    const result = spawnSync('systemd-analyze', ['verify', '--user', path.join(unitDir, 'sandboxd.socket'), path.join(unitDir, 'sandboxd.service')], {
      env: { ...process.env, XDG_RUNTIME_DIR: runtime },
      encoding: 'utf8',
    });
    expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
    const directives = (unit: string): string[] => unit.split('\n').filter((line) => /^[A-Za-z]+=/.test(line)).map((line) => line.slice(0, line.indexOf('=')));
    expect(directives(units.service)).toEqual(['Description', 'Requires', 'After', 'Type', 'ExecStart', 'WorkingDirectory', 'Environment', 'Environment', 'Environment', 'Restart', 'RestartSec', 'TimeoutStopSec', 'WantedBy']);
  });

  it('reads how the service\'s last run ended from `systemctl --user show`', () => {
    const manager = systemdManager({ unitDir: '/x', templates, user: 'me' });
    expect(manager.lastExit('ActiveState=failed\nExecMainStatus=203\nResult=exit-code\n')).toBe('failed, last exit status 203 (exit-code)');
    expect(manager.lastExit('Failed to connect to bus')).toBeNull();
  });

  it('unreachable: the remedy names the user; where systemd is not the init system it says so and points at auto-start', async () => {
    const dir = mkdtempSync('/tmp/sbx-systemd-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const noBus: CommandRunner = () => Promise.resolve({ exitCode: 1, stdout: '', stderr: 'Failed to connect to bus: No medium found' });
    // systemd runs (its booted dir exists) but this shell has no user bus: lingering is the way.
    mkdirSync(path.join(dir, 'booted'));
    const booted = systemdManager({ unitDir: '/x', templates, user: 'alice', bootedDir: path.join(dir, 'booted') });
    await expect(assertReachable(booted, noBus)).rejects.toMatchObject({
      code: 'SERVICE_MANAGER_UNREACHABLE',
      message: 'systemd cannot be reached from this shell: `systemctl --user show-environment` failed: Failed to connect to bus: No medium found',
      remedy: expect.stringContaining('`loginctl enable-linger alice`') as string,
    });
    const notInit = systemdManager({ unitDir: '/x', templates, user: 'alice', bootedDir: path.join(dir, 'absent') });
    const error = await assertReachable(notInit, noBus).catch((caught: unknown) => caught as SandboxdError);
    expect(error).toMatchObject({ code: 'SERVICE_MANAGER_UNREACHABLE', message: expect.stringMatching(/^systemd is not the init system here \(no .*absent/) as string });
    expect((error as SandboxdError).remedy).toContain('auto-start');
    expect((error as SandboxdError).remedy).not.toContain('enable-linger');
    // A user manager that answers is used, whatever PID 1 is.
    await expect(assertReachable(notInit, () => Promise.resolve({ exitCode: 0, stdout: '', stderr: '' }))).resolves.toBeUndefined();
  });

  it('installs under $XDG_CONFIG_HOME/systemd/user (else ~/.config), reloads and enables the socket', () => {
    expect(systemdUnitDir({ XDG_CONFIG_HOME: '/x/cfg' }, '/home/me')).toBe('/x/cfg/systemd/user');
    expect(systemdUnitDir({}, '/home/me')).toBe('/home/me/.config/systemd/user');
    const manager = systemdManager({ unitDir: '/x/cfg/systemd/user', templates, user: 'me' });
    expect(manager.installSteps(spec()).map((step) => (step.kind === 'write' ? `write ${step.path}` : step.kind === 'run' ? step.argv.join(' ') : step.kind))).toEqual([
      'write /x/cfg/systemd/user/sandboxd.service',
      'write /x/cfg/systemd/user/sandboxd.socket',
      'systemctl --user daemon-reload',
      'systemctl --user enable --now sandboxd.socket',
    ]);
  });
});

describe('socket activation', () => {
  it('takes fd 3 only when LISTEN_PID names this process and LISTEN_FDS is at least 1', () => {
    expect(inheritedListenFd({ LISTEN_PID: '42', LISTEN_FDS: '1' }, 42)).toBe(3);
    expect(inheritedListenFd({ LISTEN_PID: '41', LISTEN_FDS: '1' }, 42)).toBeNull();
    expect(inheritedListenFd({ LISTEN_PID: '42', LISTEN_FDS: '0' }, 42)).toBeNull();
    expect(inheritedListenFd({ LISTEN_PID: '42', LISTEN_FDS: 'x' }, 42)).toBeNull();
    expect(inheritedListenFd({}, 42)).toBeNull();
  });

  it('scrubs the variables so children (ssh tunnels) never see them', () => {
    const env: Record<string, string | undefined> = { LISTEN_PID: '42', LISTEN_FDS: '1', LISTEN_FDNAMES: 'sandboxd.socket', PATH: '/usr/bin' };
    scrubActivationEnv(env);
    expect(env).toEqual({ PATH: '/usr/bin' });
  });
});
