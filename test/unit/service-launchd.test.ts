import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { LAUNCHD_LABEL, launchdManager, parseProgramArguments, renderPlist } from '../../client/service/launchd.js';
import { assertReachable, executeSteps } from '../../client/service/manager.js';
import type { CommandRunner, ServiceSpec } from '../../client/service/service.js';
import { readTemplate } from '../../client/service/templates.js';
import { resolvePaths } from '../../shared/paths.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const hasPython = spawnSync('python3', ['-c', 'import plistlib']).status === 0;

type Plist = string | boolean | Plist[] | { [key: string]: Plist };

/**
 * Test-only property-list reader (plutil is macOS-only): dict, array, string and booleans, the
 * elements the template uses; anything else fails the test.
 */
function parsePlist(xml: string): Plist {
  const body = xml.replace(/<\?xml[^>]*\?>/, '').replace(/<!DOCTYPE[^>]*>/, '').replace(/<!--[\s\S]*?-->/g, '');
  const tokens = body.match(/<[^>]+>|[^<]+/g)?.filter((token) => token.trim() !== '') ?? [];
  let at = 0;
  const unescape = (text: string): string => text.replaceAll('&lt;', '<').replaceAll('&gt;', '>').replaceAll('&quot;', '"').replaceAll('&apos;', "'").replaceAll('&amp;', '&');
  const value = (): Plist => {
    const tag = tokens[at++];
    if (tag === '<true/>') return true;
    if (tag === '<false/>') return false;
    if (tag === '<string>') {
      const text = tokens[at] === '</string>' ? '' : unescape(tokens[at++] ?? '');
      expect(tokens[at++]).toBe('</string>');
      return text;
    }
    if (tag === '<array>') {
      const items: Plist[] = [];
      while (tokens[at] !== '</array>') items.push(value());
      at += 1;
      return items;
    }
    if (tag === '<dict>') {
      const dict: Record<string, Plist> = {};
      while (tokens[at] !== '</dict>') {
        expect(tokens[at++]).toBe('<key>');
        const key = unescape(tokens[at++] ?? '');
        expect(tokens[at++]).toBe('</key>');
        dict[key] = value();
      }
      at += 1;
      return dict;
    }
    throw new Error(`unexpected plist token ${String(tag)}`);
  };
  expect(tokens[at++]).toBe('<plist version="1.0">');
  const root = value();
  expect(tokens.slice(at)).toEqual(['</plist>']);
  return root;
}

function spec(home: string): ServiceSpec {
  return {
    node: '/opt/homebrew/Cellar/node/22.1.0/bin/node',
    entry: '/opt/homebrew/lib/node_modules/sandboxd/dist/client/cli/main.js',
    env: { PATH: '/opt/podman/bin:/usr/bin:/bin', SANDBOXD_RUNTIME_DIR: '/tmp/a <&> b' },
    paths: resolvePaths({ platform: 'darwin', env: {}, uid: 501, home }),
  };
}

describe('launchd LaunchAgent', () => {
  it('renders a property list with absolute paths, RunAtLoad, a KeepAlive that spares a clean exit, and the install-time PATH', () => {
    const plist = parsePlist(renderPlist(readTemplate('launchd', 'sandboxd.plist'), spec('/Users/me')));
    expect(plist).toEqual({
      Label: LAUNCHD_LABEL,
      ProgramArguments: ['/opt/homebrew/Cellar/node/22.1.0/bin/node', '/opt/homebrew/lib/node_modules/sandboxd/dist/client/cli/main.js', 'daemon', '--service-manager', 'launchd'],
      RunAtLoad: true,
      KeepAlive: { SuccessfulExit: false },
      ProcessType: 'Interactive',
      WorkingDirectory: '/',
      StandardOutPath: '/Users/me/Library/Logs/sandboxd/launchd.log',
      StandardErrorPath: '/Users/me/Library/Logs/sandboxd/launchd.log',
      EnvironmentVariables: { PATH: '/opt/podman/bin:/usr/bin:/bin', SANDBOXD_RUNTIME_DIR: '/tmp/a <&> b' },
    });
  });

  it('refuses a control character in any value it renders, and reads back what it wrote (ProgramArguments)', () => {
    const template = readTemplate('launchd', 'sandboxd.plist');
    const base = spec('/Users/me');
    const tricky = { ...base, node: `/Users/o'neil/.local/bin/node`, entry: '/opt/a & b/<sandboxd>/"main".js' };
    expect(parseProgramArguments(renderPlist(template, tricky))).toEqual([tricky.node, tricky.entry, 'daemon', '--service-manager', 'launchd']);
    const cases: [string, ServiceSpec][] = [
      ['node', { ...base, node: '/opt/node\n</string><string>--inspect' }],
      ['entry', { ...base, entry: '/opt/main.js\r' }],
      ['SANDBOXD_RUNTIME_DIR', { ...base, env: { ...base.env, SANDBOXD_RUNTIME_DIR: '/tmp/a\tb' } }],
      ['log dir', { ...base, paths: resolvePaths({ platform: 'darwin', env: { SANDBOXD_LOG_DIR: '/logs\u0001' }, uid: 501, home: '/Users/me' }) }],
      ['DEL', { ...base, env: { ...base.env, SANDBOXD_STATE_DIR: '/s\u007f' } }],
    ];
    for (const [what, bad] of cases) {
      expect(() => renderPlist(template, bad), what).toThrow(expect.objectContaining({ code: 'SERVICE_VALUE_UNSUPPORTED' }) as Error);
    }
  });

  it.skipIf(!hasPython && process.env.CI === undefined)('renders what a real property-list reader (python plistlib) reads back value for value', () => {
    const tricky = { ...spec('/Users/m&e <x>'), node: `/Users/o'neil/bin/node`, entry: '/opt/"quoted"/ü/main.js', env: { PATH: '/a b:/c%d', SANDBOXD_RUNTIME_DIR: `/tmp/<&>'"` } };
    const rendered = renderPlist(readTemplate('launchd', 'sandboxd.plist'), tricky);
    const read = spawnSync('python3', ['-c', 'import json, plistlib, sys; print(json.dumps(plistlib.loads(sys.stdin.buffer.read())))'], { input: rendered, encoding: 'utf8' });
    expect(read.stderr).toBe('');
    expect(JSON.parse(read.stdout)).toMatchObject({
      ProgramArguments: [tricky.node, tricky.entry, 'daemon', '--service-manager', 'launchd'],
      EnvironmentVariables: tricky.env,
      StandardOutPath: `${tricky.paths.logDir}/launchd.log`,
    });
  });

  it('without a GUI login (ssh only) install stops before anything: SERVICE_MANAGER_UNREACHABLE with a remedy that works there', async () => {
    const manager = launchdManager({ home: '/Users/me', uid: 501, template: () => readTemplate('launchd', 'sandboxd.plist') });
    // What launchctl answers over ssh with nobody logged in graphically as the user.
    const noGui: CommandRunner = (file, args) => Promise.resolve(file === 'launchctl' && args.join(' ') === 'print gui/501' ? { exitCode: 125, stdout: '', stderr: 'Bad request.\nCould not find domain for port identifier: 125: Domain does not support specified action' } : { exitCode: 0, stdout: '', stderr: '' });
    await expect(assertReachable(manager, noGui)).rejects.toMatchObject({
      code: 'SERVICE_MANAGER_UNREACHABLE',
      message: 'launchd cannot be reached from this shell: `launchctl print gui/501` failed: Bad request. Could not find domain for port identifier: 125: Domain does not support specified action',
      remedy: expect.stringContaining('Log in graphically') as string,
    });
    expect(manager.lastExit('gui/501/dev.sandboxd.daemon = {\n\tactive count = 1\n\tstate = running\n\tlast exit code = (never exited)\n}')).toBe('running, last exit code (never exited)');
    expect(manager.lastExit('\tstate = not running\n\tlast exit code = 78: EX_CONFIG\n')).toBe('not running, last exit code 78: EX_CONFIG');
  });

  it('install waits out an asynchronous bootout before bootstrap; uninstall unloads and removes (launchctl stand-in)', async () => {
    const dir = mkdtempSync('/tmp/sbx-launchd-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const calls = path.join(dir, 'calls');
    // Stands in for macOS launchctl: records its argv; `print` succeeds twice (the old job still
    // unloading after bootout), then fails as for a job that is gone.
    const launchctl = path.join(dir, 'launchctl');
    writeFileSync(
      launchctl,
      `#!/bin/sh\necho "$*" >> ${calls}\nif [ "$1" = print ]; then n=$(grep -c '^print' ${calls}); [ "$n" -le 2 ] && exit 0; exit 113; fi\nexit 0\n`,
    );
    chmodSync(launchctl, 0o755);
    const run: CommandRunner = async (file, args) => {
      const result = await execa(path.join(dir, file), [...args], { reject: false });
      return { exitCode: result.exitCode ?? null, stdout: result.stdout, stderr: result.stderr };
    };
    const home = path.join(dir, 'home');
    const manager = launchdManager({ home, uid: 501, template: () => readTemplate('launchd', 'sandboxd.plist') });
    const deps = { run, sleep: () => Promise.resolve(), waitTimeoutMs: 5_000 };
    await executeSteps(manager.installSteps(spec(home)), deps);

    const plistPath = path.join(home, 'Library', 'LaunchAgents', `${LAUNCHD_LABEL}.plist`);
    expect(parsePlist(readFileSync(plistPath, 'utf8'))).toMatchObject({ Label: LAUNCHD_LABEL });
    expect(readFileSync(calls, 'utf8').trim().split('\n')).toEqual([
      `bootout gui/501/${LAUNCHD_LABEL}`,
      `print gui/501/${LAUNCHD_LABEL}`,
      `print gui/501/${LAUNCHD_LABEL}`,
      `print gui/501/${LAUNCHD_LABEL}`,
      `bootstrap gui/501 ${plistPath}`,
    ]);

    rmSync(calls);
    await executeSteps(manager.uninstallSteps(), deps);
    expect(existsSync(plistPath)).toBe(false);
    expect(readFileSync(calls, 'utf8').trim().split('\n')[0]).toBe(`bootout gui/501/${LAUNCHD_LABEL}`);
  });

  it('fails with SERVICE_FAILED naming launchctl when bootstrap fails, and when the old job never unloads', async () => {
    const failing: CommandRunner = (file, args) => Promise.resolve(args[0] === 'bootstrap' ? { exitCode: 5, stdout: '', stderr: 'Bootstrap failed: 5: Input/output error' } : { exitCode: args[0] === 'print' ? 113 : 0, stdout: '', stderr: '' });
    const manager = launchdManager({ home: '/nonexistent-home', uid: 501, template: () => readTemplate('launchd', 'sandboxd.plist') });
    const steps = manager.installSteps(spec('/nonexistent-home')).filter((step) => step.kind !== 'write');
    await expect(executeSteps(steps, { run: failing, sleep: () => Promise.resolve(), waitTimeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'SERVICE_FAILED',
      message: expect.stringContaining('`launchctl bootstrap gui/501 /nonexistent-home/Library/LaunchAgents/dev.sandboxd.daemon.plist` failed (exit 5): Bootstrap failed: 5: Input/output error') as string,
    });
    const stuck: CommandRunner = () => Promise.resolve({ exitCode: 0, stdout: '', stderr: '' });
    await expect(executeSteps(steps, { run: stuck, sleep: () => new Promise((resolve) => setTimeout(resolve, 20)), waitTimeoutMs: 100 })).rejects.toMatchObject({
      code: 'SERVICE_FAILED',
      message: `timed out after 100 ms waiting for gui/501/${LAUNCHD_LABEL} to unload`,
    });
  });
});
