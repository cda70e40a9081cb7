import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { daemonEnvironment, resolveDaemonCommand, type LaunchInputs } from '../../client/daemon-launch.js';
import { SandboxdError } from '../../shared/errors.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Layout {
  dir: string;
  /** `<dir>/bin/sandboxd`, an executable on `pathDirs`. */
  onPath: string;
  /** `<dir>/opt/sandboxd`, named by SANDBOXD_BIN. */
  bin: string;
  /** `<dir>/pkg/dist/bin/sandboxd.js`, this package's CLI. */
  entry: string;
  /** `<dir>/pkg/dist/client`, where this package's client code runs from. */
  moduleDir: string;
  pathValue: string;
}

/** A sandboxd package at `root` (package.json named sandboxd), with or without its built CLI. */
function sandboxdPackage(root: string, built = true, name = 'sandboxd'): string {
  mkdirSync(path.join(root, 'dist', 'bin'), { recursive: true });
  writeFileSync(path.join(root, 'package.json'), JSON.stringify({ name, version: '0.1.0' }));
  const cli = path.join(root, 'dist', 'bin', 'sandboxd.js');
  if (built) writeFileSync(cli, '');
  return cli;
}

function executable(file: string): string {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, '#!/bin/sh\n');
  chmodSync(file, 0o755);
  return file;
}

function layout(): Layout {
  const dir = mkdtempSync('/tmp/sbx-launch-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const entry = sandboxdPackage(path.join(dir, 'pkg'));
  const moduleDir = path.join(dir, 'pkg', 'dist', 'client');
  mkdirSync(moduleDir, { recursive: true });
  mkdirSync(path.join(dir, 'empty'));
  return {
    dir,
    onPath: executable(path.join(dir, 'bin', 'sandboxd')),
    bin: executable(path.join(dir, 'opt', 'sandboxd')),
    entry,
    moduleDir,
    pathValue: ['relative/bin', path.join(dir, 'empty'), path.join(dir, 'bin')].join(':'),
  };
}

function inputs(l: Layout, env: NodeJS.ProcessEnv, option?: string[]): LaunchInputs {
  return { env, moduleDir: l.moduleDir, execPath: '/usr/bin/node', bun: false, ...(option === undefined ? {} : { option }) };
}

async function failure(promise: Promise<unknown>): Promise<SandboxdError> {
  const error = await promise.catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(SandboxdError);
  return error as SandboxdError;
}

describe('resolveDaemonCommand: option, SANDBOXD_BIN, PATH, package (DESIGN §10)', () => {
  it('1. the daemonCommand option wins over everything, with daemon appended', async () => {
    const l = layout();
    const command = await resolveDaemonCommand(inputs(l, { SANDBOXD_BIN: l.bin, PATH: l.pathValue }, [l.bin, '--flag']));
    expect(command).toEqual({ file: l.bin, args: ['--flag', 'daemon'], source: 'option' });
  });

  it('1. a bare name in the option is looked up on the client PATH', async () => {
    const l = layout();
    const command = await resolveDaemonCommand(inputs(l, { PATH: l.pathValue }, ['sandboxd']));
    expect(command).toEqual({ file: l.onPath, args: ['daemon'], source: 'option' });
  });

  it('2. SANDBOXD_BIN wins over PATH and the package', async () => {
    const l = layout();
    expect(await resolveDaemonCommand(inputs(l, { SANDBOXD_BIN: l.bin, PATH: l.pathValue }))).toEqual({ file: l.bin, args: ['daemon'], source: 'SANDBOXD_BIN' });
  });

  it('3. sandboxd on PATH (absolute entries only) wins over the package', async () => {
    const l = layout();
    expect(await resolveDaemonCommand(inputs(l, { PATH: l.pathValue, SANDBOXD_BIN: '' }))).toEqual({ file: l.onPath, args: ['daemon'], source: 'PATH' });
  });

  it('4. falls back to this package\'s CLI run by the current runtime', async () => {
    const l = layout();
    expect(await resolveDaemonCommand(inputs(l, { PATH: path.join(l.dir, 'empty') }))).toEqual({
      file: '/usr/bin/node',
      args: [l.entry, 'daemon'],
      source: 'package',
    });
  });

  it('4. bundled into a program, finds the sandboxd package the program installed beside itself', async () => {
    const l = layout();
    const app = path.join(l.dir, 'app');
    const cli = sandboxdPackage(path.join(app, 'node_modules', 'sandboxd'));
    // What a bundle's directory holds: its own package.json (the program's), no sandboxd.
    sandboxdPackage(path.join(app, 'bundle'), false, 'llxprt');
    const bundled: LaunchInputs = { env: { PATH: path.join(l.dir, 'empty') }, moduleDir: path.join(app, 'bundle'), execPath: '/usr/bin/node', bun: false };
    expect(await resolveDaemonCommand(bundled)).toEqual({ file: '/usr/bin/node', args: [cli, 'daemon'], source: 'package' });
  });

  it('4. a package whose CLI is not built is passed over for the next one up', async () => {
    const l = layout();
    const outer = sandboxdPackage(path.join(l.dir, 'node_modules', 'sandboxd'));
    rmSync(l.entry);
    expect((await resolveDaemonCommand(inputs(l, { PATH: path.join(l.dir, 'empty') }))).args).toEqual([outer, 'daemon']);
  });

  it('4. a client on Bun runs the package\'s CLI on node from PATH, else on Bun', async () => {
    const l = layout();
    const node = executable(path.join(l.dir, 'nodebin', 'node'));
    const onBun = (pathValue: string): LaunchInputs => ({ env: { PATH: pathValue }, moduleDir: l.moduleDir, execPath: '/usr/local/bin/bun', bun: true });
    expect(await resolveDaemonCommand(onBun(path.dirname(node)))).toEqual({ file: node, args: [l.entry, 'daemon'], source: 'package' });
    expect(await resolveDaemonCommand(onBun(path.join(l.dir, 'empty')))).toEqual({ file: '/usr/local/bin/bun', args: [l.entry, 'daemon'], source: 'package' });
  });

  it('refuses an option that names no executable, pointing at SANDBOXD_BIN', async () => {
    const l = layout();
    const error = await failure(resolveDaemonCommand(inputs(l, { PATH: l.pathValue }, [l.entry])));
    expect(error.code).toBe('DAEMON_START_FAILED');
    expect(error.message).toBe(`the daemonCommand option names "${l.entry}", which is not an executable file`);
    expect(error.remedy).toBe('Pass the path of the `sandboxd` executable in daemonCommand, or drop the option and set SANDBOXD_BIN to it.');
  });

  it('refuses a SANDBOXD_BIN that does not exist instead of falling through', async () => {
    const l = layout();
    const missing = path.join(l.dir, 'nope', 'sandboxd');
    const error = await failure(resolveDaemonCommand(inputs(l, { SANDBOXD_BIN: missing, PATH: l.pathValue })));
    expect(error.code).toBe('DAEMON_START_FAILED');
    expect(error.message).toBe(`SANDBOXD_BIN is ${missing}, which is not an executable file`);
    expect(error.remedy).toBe('Set SANDBOXD_BIN to the path of the `sandboxd` executable, or unset it.');
  });

  it('bundled with no sandboxd anywhere: says every place it looked, and names SANDBOXD_BIN in the remedy', async () => {
    const l = layout();
    const empty = path.join(l.dir, 'empty');
    const bundled: LaunchInputs = { env: { PATH: empty }, moduleDir: path.join(l.dir, 'app', 'bundle'), execPath: '/usr/bin/node', bun: false };
    const error = await failure(resolveDaemonCommand(bundled));
    expect(error.code).toBe('DAEMON_START_FAILED');
    expect(error.message).toBe(
      `cannot find the sandboxd executable. Looked at: the daemonCommand option (not given), SANDBOXD_BIN (not set), \`sandboxd\` in PATH (${empty}); no sandboxd package with a built dist/bin/sandboxd.js in ${bundled.moduleDir ?? ''} or any directory above it, or in their node_modules`,
    );
    expect(error.message).not.toContain('/nonexistent');
    expect(error.remedy).toBe('Set SANDBOXD_BIN to the path of the `sandboxd` executable, or put `sandboxd` on PATH.');
  });

  it('in a CommonJS bundle (no import.meta.url) it says it could not look for a package', async () => {
    const error = await failure(resolveDaemonCommand({ env: {}, moduleDir: null, execPath: '/usr/bin/node', bun: false }));
    expect(error.message).toBe(
      'cannot find the sandboxd executable. Looked at: the daemonCommand option (not given), SANDBOXD_BIN (not set), `sandboxd` in PATH (not set); no package could be looked for: the runtime does not say where this code is',
    );
  });
});

describe('daemonEnvironment', () => {
  it('keeps who the user is, the app it runs under and where sandboxd lives, and nothing of the client\'s own settings', () => {
    const env = daemonEnvironment(
      {
        HOME: '/h',
        USER: 'u',
        LOGNAME: 'u',
        XDG_RUNTIME_DIR: '/run/user/1',
        XDG_STATE_HOME: '/s',
        XDG_CONFIG_HOME: '/c',
        XDG_CACHE_HOME: '/k',
        SANDBOXD_RUNTIME_DIR: '/r',
        SANDBOXD_LOG_LEVEL: 'debug',
        CONTAINERS_CONF: '/x',
        PODMAN_CONNECTIONS_CONF: '/y',
        SSH_AUTH_SOCK: '/agent',
        LANG: 'de_DE.UTF-8',
        PATH: '/home/u/evil:/usr/bin',
        __CFBundleIdentifier: 'com.apple.Terminal',
        TERM_PROGRAM: 'Apple_Terminal',
        TERM_PROGRAM_VERSION: '455',
        SSH_CONNECTION: '192.0.2.9 52311 192.0.2.2 22',
      },
      { file: '/opt/node/bin/sandboxd', args: ['daemon'], source: 'PATH' },
      '/usr/local/bin/node',
      'linux',
    );
    expect(env).toEqual({
      HOME: '/h',
      USER: 'u',
      LOGNAME: 'u',
      XDG_RUNTIME_DIR: '/run/user/1',
      XDG_STATE_HOME: '/s',
      XDG_CONFIG_HOME: '/c',
      XDG_CACHE_HOME: '/k',
      SANDBOXD_RUNTIME_DIR: '/r',
      SANDBOXD_LOG_LEVEL: 'debug',
      // Where it was started from: macOS privacy judges the daemon as that app.
      __CFBundleIdentifier: 'com.apple.Terminal',
      TERM_PROGRAM: 'Apple_Terminal',
      SSH_CONNECTION: '192.0.2.9 52311 192.0.2.2 22',
      PATH: '/opt/node/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin',
    });
  });
});
