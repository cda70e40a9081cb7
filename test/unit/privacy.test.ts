import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { checkPrivacy } from '../../client/doctor/checks.js';
import { gitHostFacts, sessionGit } from '../../daemon/plan/git/git-host.js';
import { createPrivacyGate, deniedByPrivacy, privacyDenied, privacyPrincipal, probeReadable, protectedFolderOf, serviceGrantNote, type PrivacyPrincipal } from '../../daemon/os/privacy.js';
import { createSubprocessRunner, runSubprocess, type SubprocessEvent } from '../../daemon/os/subprocess.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { Cleanup, ROOT } from '../helpers.js';
import { memoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** Real output captured on Macs (sources in test/fixtures/mac/SOURCES.md). */
const fixture = (name: string): string => readFileSync(path.join(ROOT, 'test/fixtures/mac', name), 'utf8');

const HOME = '/Users/me';

function tempDir(): string {
  const dir = mkdtempSync('/tmp/sbx-privacy-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}
const NODE = '/opt/homebrew/Cellar/node/24.1.0/bin/node';
const LAUNCHD: PrivacyPrincipal = { binary: NODE, started: 'launchd', app: null };
const OTHER: PrivacyPrincipal = { binary: NODE, started: 'other', app: null };

describe('what macOS privacy refuses', () => {
  it.each(['tcc.git.unable-to-read-cwd.vibe-kanban.txt', 'tcc.git.unable-to-read-cwd.claude-desktop.txt', 'tcc.shell-init.getcwd.disclaimed-child.txt', 'tcc.cron.ls-documents.macos26.txt'])(
    '%s is privacy',
    (name) => {
      expect(deniedByPrivacy(fixture(name))).toBe(true);
    },
  );

  it.each([
    'git-shim.no-clt.requesting-install.txt',
    'git-shim.no-clt.no-ui.txt',
    'git-shim.invalid-active-developer-path.mojave.txt',
    'git-shim.invalid-active-developer-path.catalina.txt',
    'xcode-select-p.no-developer-dir.macos14.stderr.txt',
  ])('%s is a missing toolchain, not privacy', (name) => {
    expect(deniedByPrivacy(fixture(name))).toBe(false);
  });

  it('knows the protected folders, and not their siblings', () => {
    expect(protectedFolderOf('/Users/me/Documents/p', HOME)).toEqual({ path: '/Users/me/Documents', name: 'Documents' });
    expect(protectedFolderOf('/Users/me/Desktop', HOME)?.name).toBe('Desktop');
    expect(protectedFolderOf('/Users/me/Downloads/a/b', HOME)?.name).toBe('Downloads');
    expect(protectedFolderOf('/Users/me/Library/Mobile Documents/com~apple~CloudDocs/p', HOME)?.name).toBe('iCloud Drive');
    expect(protectedFolderOf('/Users/me/Library/CloudStorage/GoogleDrive-me/p', HOME)?.name).toBe('a cloud storage provider');
    expect(protectedFolderOf('/Users/me/Documents2/p', HOME)).toBeNull();
    expect(protectedFolderOf('/Users/me/src/p', HOME)).toBeNull();
    expect(protectedFolderOf('/Users/other/Documents/p', HOME)).toBeNull();
  });

  it('names the folder, and for the launchd service the node binary to grant, which a Node upgrade changes', () => {
    const error = privacyDenied('/Users/me/Documents/p', HOME, LAUNCHD);
    expect(error.code).toBe('PRIVACY_DENIED');
    expect(error.message).toBe('macOS privacy settings keep the sandboxd service, which launchd starts, from reading /Users/me/Documents/p (in Documents, /Users/me/Documents)');
    expect(error.remedy).toBe(
      `System Settings → Privacy & Security → Files and Folders (Documents) or Full Disk Access → add ${NODE} (the node the service runs), then run \`sandboxd restart\`; a Node upgrade changes that binary and needs the grant again. Or keep the project outside Desktop, Documents, Downloads and iCloud Drive.`,
    );
    expect(privacyDenied('/Volumes/x/p', HOME, OTHER).message).toBe('macOS privacy settings keep the sandboxd daemon from reading /Volumes/x/p');
  });
});

/**
 * How the daemon was started, from its environment (which auto-start passes on). The values are
 * what the apps set: `__CFBundleIdentifier` com.apple.Terminal, com.googlecode.iterm2 (herdrdev/herdr#3028),
 * com.microsoft.VSCode (jnoortheen/xontrib-cmd-durations#16); TERM_PROGRAM Apple_Terminal, and
 * tmux's own `tmux`; sshd's SSH_CONNECTION `client-ip client-port server-ip server-port`.
 */
describe('whom macOS privacy judges, by how the daemon was started', () => {
  const principal = (serviceManager: 'launchd' | 'systemd' | undefined, env: NodeJS.ProcessEnv): PrivacyPrincipal => privacyPrincipal({ binary: NODE, serviceManager, env });
  const TERMINAL = { __CFBundleIdentifier: 'com.apple.Terminal', TERM_PROGRAM: 'Apple_Terminal' };
  const SSH = { SSH_CONNECTION: '192.0.2.9 52311 192.0.2.2 22' };

  it.each<[string, 'launchd' | undefined, NodeJS.ProcessEnv, PrivacyPrincipal]>([
    ['the launchd service, whatever its environment says', 'launchd', TERMINAL, LAUNCHD],
    ['auto-start from Terminal', undefined, TERMINAL, { binary: NODE, started: 'app', app: 'com.apple.Terminal' }],
    ['auto-start from iTerm2 inside tmux: the app that started tmux, not tmux', undefined, { __CFBundleIdentifier: 'com.googlecode.iterm2', TERM_PROGRAM: 'tmux' }, { binary: NODE, started: 'app', app: 'com.googlecode.iterm2' }],
    ['auto-start from an editor\'s terminal', undefined, { __CFBundleIdentifier: 'com.microsoft.VSCode', TERM_PROGRAM: 'vscode' }, { binary: NODE, started: 'app', app: 'com.microsoft.VSCode' }],
    ['auto-start from an ssh login', undefined, { ...SSH, TERM_PROGRAM: '' }, { binary: NODE, started: 'ssh', app: null }],
    ['auto-start from tmux in an ssh login', undefined, { ...SSH, TERM_PROGRAM: 'tmux' }, { binary: NODE, started: 'ssh', app: null }],
    ['a terminal that names itself only in TERM_PROGRAM', undefined, { TERM_PROGRAM: 'WezTerm' }, { binary: NODE, started: 'app', app: 'WezTerm' }],
    ['nothing named (cron, a script with a scrubbed environment)', undefined, { HOME: HOME }, OTHER],
  ])('%s', (_shape, serviceManager, env, expected) => {
    expect(principal(serviceManager, env)).toEqual(expected);
  });

  it('started from an app: grant that app (or restart from a terminal that has access, or install the service and grant node), never node alone', () => {
    const error = privacyDenied('/Users/me/Documents/p', HOME, principal(undefined, TERMINAL));
    expect(error.message).toBe('macOS privacy settings keep the sandboxd daemon, started from com.apple.Terminal, from reading /Users/me/Documents/p (in Documents, /Users/me/Documents)');
    expect(error.remedy).toBe(
      'macOS judges com.apple.Terminal, the app the daemon was started from: allow it in System Settings → Privacy & Security → Files and Folders (Documents) or Full Disk Access, quit and reopen it and run `sandboxd restart` there; or run `sandboxd restart` from a terminal that has that access; or run `sandboxd install` and grant the node binary it names (a Node upgrade needs that grant again). Or keep the project outside Desktop, Documents, Downloads and iCloud Drive.',
    );
    expect(error.remedy).not.toContain(NODE);
  });

  it('started from an ssh login: Remote Login\'s full disk access, or a terminal, or the service', () => {
    const error = privacyDenied('/Users/me/Desktop/p', HOME, principal(undefined, SSH));
    expect(error.message).toBe('macOS privacy settings keep the sandboxd daemon, started from an ssh login, from reading /Users/me/Desktop/p (in Desktop, /Users/me/Desktop)');
    expect(error.remedy).toMatch(/^macOS judges ssh logins as Remote Login: System Settings → General → Sharing → Remote Login → Allow full disk access for remote users, then run `sandboxd restart`; or run `sandboxd restart` from a terminal app .*; or run `sandboxd install` and grant the node binary it names/);
  });

  it('started by something that names no app: a terminal with access, or the service', () => {
    const error = privacyDenied('/Users/me/Downloads/p', HOME, OTHER);
    expect(error.message).toBe('macOS privacy settings keep the sandboxd daemon from reading /Users/me/Downloads/p (in Downloads, /Users/me/Downloads)');
    expect(error.remedy).toMatch(/^macOS judges the app the daemon was started from, which its environment does not name: run `sandboxd restart` from a terminal app that may read the folder \(System Settings → Privacy & Security → Files and Folders \(Downloads\) or Full Disk Access\); or run `sandboxd install`/);
  });

  it('`sandboxd install` on a Mac names the node the service runs, and that a Node upgrade needs the grant again', () => {
    expect(serviceGrantNote(NODE)).toBe(
      `macOS privacy judges the service as ${NODE}, not as your terminal: for projects in Desktop, Documents, Downloads or iCloud Drive, add it in System Settings → Privacy & Security → Full Disk Access (or Files and Folders), then run \`sandboxd restart\`; a Node upgrade changes that binary and needs the grant again (\`sandboxd doctor\` checks it).`,
    );
  });
});

describe('the privacy gate', () => {
  it('a directory that is readable, or not there at all, is not privacy', async () => {
    const dir = tempDir();
    expect(await probeReadable(dir)).toBe(true);
    expect(await probeReadable(path.join(dir, 'gone'))).toBe(true);
  });

  it('is asked on a Mac only', async () => {
    const asked: string[] = [];
    const readable = (dir: string): Promise<boolean> => {
      asked.push(dir);
      return Promise.resolve(false);
    };
    await createPrivacyGate({ platform: 'linux', home: HOME, principal: LAUNCHD, readable }).check('/home/me/p');
    expect(asked).toEqual([]);
    await expect(createPrivacyGate({ platform: 'darwin', home: HOME, principal: LAUNCHD, readable }).check('/Users/me/Desktop/p')).rejects.toMatchObject({ code: 'PRIVACY_DENIED' });
    expect(asked).toEqual(['/Users/me/Desktop/p']);
  });
});

describe('an acquire in a folder macOS privacy keeps from the daemon', () => {
  it('fails closed with PRIVACY_DENIED before git runs, naming the folder and the node to grant', async () => {
    const dir = tempDir();
    // Stands in for TCC (there is none on Linux): the workdir cannot be listed.
    const denied = path.join(dir, 'Documents', 'project');
    const spawned: SubprocessEvent[] = [];
    const run = createSubprocessRunner({ observe: (event) => spawned.push(event) });
    const daemon = memoryDaemon(dir, {}, undefined, { run }, {
      platform: 'darwin',
      privacy: { principal: LAUNCHD, readable: (one) => Promise.resolve(one !== denied && !one.startsWith(`${denied}/`)) },
    });
    cleanup.add(() => daemon.close());
    mkdirSync(denied, { recursive: true });
    const reply = await daemon.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) },
      payload: { engine: 'docker', client: { pid: process.pid, cwd: denied, path: '/usr/bin:/bin' }, sshAgent: 'off' },
    });
    expect(reply.statusCode).toBe(403);
    const { error } = reply.json<{ error: { code: string; message: string; remedy: string } }>();
    expect(error.code).toBe('PRIVACY_DENIED');
    expect(error.message).toContain(`${denied} (in Documents, ${path.join(dir, 'Documents')})`);
    expect(error.remedy).toContain(`add ${NODE}`);
    expect(spawned.map((event) => path.basename(event.file))).not.toContain('git');
    expect(daemon.registry.size).toBe(0);
  });
});

describe('git refused by macOS privacy', () => {
  it('fails closed instead of mounting plain files, and the Mac message names the folder and the node', async () => {
    const dir = tempDir();
    const bin = path.join(dir, 'bin');
    const cwd = path.join(dir, 'Desktop', 'p');
    mkdirSync(bin);
    mkdirSync(cwd, { recursive: true });
    // Stands in for git under TCC: what it printed on a Mac (tcc.git.unable-to-read-cwd.*).
    writeFileSync(path.join(bin, 'git'), '#!/bin/sh\necho "fatal: Unable to read current working directory: Operation not permitted" >&2\nexit 128\n', { mode: 0o755 });
    const failure: unknown = await gitHostFacts({ hostHome: dir, cwd, path: bin, xdgConfigHome: undefined }, sessionGit('darwin', runSubprocess)).catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: 'PRIVACY_DENIED', message: `the session's git cannot read ${cwd}: fatal: Unable to read current working directory: Operation not permitted` });
    const gate = (platform: 'darwin' | 'linux') => createPrivacyGate({ platform, home: dir, principal: OTHER, readable: () => Promise.resolve(true) });
    expect(gate('darwin').explain(cwd, failure)).toMatchObject({
      code: 'PRIVACY_DENIED',
      message: `macOS privacy settings keep the sandboxd daemon from reading ${cwd} (in Desktop, ${path.join(dir, 'Desktop')}): the session's git cannot read ${cwd}: fatal: Unable to read current working directory: Operation not permitted`,
    });
    expect(gate('linux').explain(cwd, failure)).toBe(failure);
  });
});

describe('doctor\'s privacy check (asks the daemon: privacy judges it apart from the terminal)', () => {
  it('the daemon answers whether it may read a directory, and which binary to grant, with no content', async () => {
    const dir = tempDir();
    const denied = path.join(dir, 'Downloads');
    const daemon = memoryDaemon(dir, {}, undefined, undefined, {
      platform: 'darwin',
      // Stands in for TCC (there is none on Linux).
      privacy: { principal: LAUNCHD, readable: (one) => Promise.resolve(one !== denied) },
    });
    cleanup.add(() => daemon.close());
    const ask = (one: string) =>
      daemon.app.inject({ method: 'POST', url: '/v1/checks/readable', headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) }, payload: { path: one } });
    expect((await ask(denied)).json()).toEqual({ readable: false, principal: LAUNCHD });
    expect((await ask(dir)).json()).toEqual({ readable: true, principal: LAUNCHD });
    expect((await ask('relative/p')).statusCode).toBe(400);
  });

  it('fails with the acquire\'s remedy, passes, or skips where there is nothing to ask', () => {
    const base = { platform: 'darwin' as const, cwd: '/Users/me/Documents/p', home: HOME };
    expect(checkPrivacy({ ...base, answer: { readable: false, principal: LAUNCHD } })).toEqual({
      name: 'privacy',
      state: 'fail',
      detail: 'macOS privacy settings keep the sandboxd service, which launchd starts, from reading /Users/me/Documents/p (in Documents, /Users/me/Documents)',
      remedy: privacyDenied('/Users/me/Documents/p', HOME, LAUNCHD).remedy,
    });
    expect(checkPrivacy({ ...base, answer: { readable: true, principal: OTHER } })).toMatchObject({ state: 'ok', detail: `the daemon (${NODE}) may read /Users/me/Documents/p` });
    expect(checkPrivacy({ ...base, answer: { readable: true, principal: { binary: NODE, started: 'app', app: 'com.apple.Terminal' } } })).toMatchObject({
      state: 'ok',
      detail: `the daemon (${NODE}, started from com.apple.Terminal) may read /Users/me/Documents/p`,
    });
    expect(checkPrivacy({ ...base, answer: { readable: false, principal: { binary: NODE, started: 'ssh', app: null } } }).remedy).toContain('Remote Login');
    expect(checkPrivacy({ ...base, answer: null }).state).toBe('skip');
    expect(checkPrivacy({ ...base, answer: { error: new Error('no route') } }).state).toBe('skip');
    expect(checkPrivacy({ ...base, platform: 'linux', answer: { readable: false, principal: OTHER } }).state).toBe('skip');
  });
});
