import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeOwnDirs } from '../../client/purge.js';
import { resolvePaths } from '../../shared/paths.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

function tempDir(): string {
  const dir = mkdtempSync('/tmp/sbx-purge-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

const uid = process.getuid?.() ?? 0;

describe('uninstall --purge: the directories', () => {
  it('removes the runtime, log and state dirs whole; a dry run only names them', async () => {
    const dir = tempDir();
    const home = path.join(dir, 'home');
    mkdirSync(home);
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_STATE_DIR: path.join(dir, 'state'), SANDBOXD_LOG_DIR: path.join(dir, 'log') }, uid, home });
    for (const made of [paths.runtimeDir, paths.logDir, path.join(paths.stateDir, 'containers/released')]) mkdirSync(made, { recursive: true });
    const dry = await removeOwnDirs(paths, home, uid, true);
    expect(dry).toEqual({ removed: [paths.runtimeDir, paths.logDir, paths.stateDir], kept: [] });
    expect(existsSync(paths.runtimeDir)).toBe(true);
    await removeOwnDirs(paths, home, uid, false);
    expect([paths.runtimeDir, paths.logDir, paths.stateDir].filter((made) => existsSync(made))).toEqual([]);
  });

  it('never removes a directory that is the home or holds it (a SANDBOXD_*_DIR pointed there), nor another user\'s', async () => {
    const dir = tempDir();
    const home = path.join(dir, 'home');
    mkdirSync(home);
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: home, SANDBOXD_RUNTIME_DIR: path.join(dir, 'rt') }, uid, home });
    mkdirSync(paths.runtimeDir);
    const result = await removeOwnDirs(paths, home, uid + 1, false);
    expect(result.removed).toEqual([]);
    expect(result.kept).toEqual([
      { dir: paths.runtimeDir, why: `it belongs to uid ${String(uid)}` },
      { dir: home, why: 'it is your home directory or holds it' },
      { dir, why: 'it is your home directory or holds it' },
    ]);
    expect(existsSync(home)).toBe(true);
  });
});
