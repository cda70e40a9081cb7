import { createHash } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { codeCacheDir, runWithCodeCache } from '../../client/cli/code-cache.js';

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A CommonJS bundle that says it ran (and with which `require` and file), and the cache directory beside it. */
function bundle(value: number): { file: string; dir: string } {
  const root = mkdtempSync(path.join(os.tmpdir(), 'sbx-code-cache-'));
  made.push(root);
  const file = path.join(root, 'bundle.cjs');
  writeFileSync(file, `globalThis.codeCacheRan = { value: ${value}, file: __filename, path: require('node:path').basename(__filename) };\nfunction later() { return ${value}; }\nlater();\n`);
  return { file, dir: path.join(root, 'cache') };
}

const ran = (): unknown => (globalThis as { codeCacheRan?: unknown }).codeCacheRan;

function dataFiles(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith('.v8cache')) : [];
}

describe("the daemon's code cache (V8 data beside a CommonJS bundle)", () => {
  it('runs the bundle as CommonJS, writes the data once (0600 in a 0700 directory) and takes it on the next start', async () => {
    const { file, dir } = bundle(1);
    const first = runWithCodeCache(file, { dir, writeAfterMs: 0 });
    expect(first.use).toBe('absent');
    expect(ran()).toEqual({ value: 1, file, path: 'bundle.cjs' });
    expect(await first.written).toBe(true);
    const [name] = dataFiles(dir);
    expect(name).toMatch(new RegExp(`^${process.version}-${process.arch}-[0-9a-f]{40}\\.v8cache$`));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(dir, name ?? '')).mode & 0o777).toBe(0o600);

    const second = runWithCodeCache(file, { dir, writeAfterMs: 0 });
    expect(second.use).toBe('used');
    expect(await second.written).toBe(false);
    expect(ran()).toEqual({ value: 1, file, path: 'bundle.cjs' });
  });

  it("never takes another bundle's data: a changed bundle of the same length gets its own, and the old data is removed", async () => {
    const { file, dir } = bundle(1);
    expect(await runWithCodeCache(file, { dir, writeAfterMs: 0 }).written).toBe(true);
    const [old] = dataFiles(dir);
    writeFileSync(file, readFileSync(file, 'utf8').replaceAll('1', '2'));
    const changed = runWithCodeCache(file, { dir, writeAfterMs: 0 });
    expect(changed.use).toBe('absent');
    expect((ran() as { value: number }).value).toBe(2);
    expect(await changed.written).toBe(true);
    expect(dataFiles(dir)).not.toContain(old);
    expect(dataFiles(dir)).toHaveLength(1);
  });

  it("names the data by the SHA-256 the build wrote on the bundle's last line, and hashes a bundle whose last line is not one", async () => {
    const { file, dir } = bundle(6);
    const text = readFileSync(file, 'utf8');
    const sha256 = (value: string): string => createHash('sha256').update(value).digest('hex');
    writeFileSync(file, `${text}// sandboxd-sha256 ${'ab'.repeat(32)}\n`);
    expect(await runWithCodeCache(file, { dir, writeAfterMs: 0 }).written).toBe(true);
    expect(dataFiles(dir)).toEqual([`${process.version}-${process.arch}-${'ab'.repeat(20)}.v8cache`]);
    const notAHash = `${text}// sandboxd-sha256 ${'ab'.repeat(31)}\n`;
    writeFileSync(file, notAHash);
    expect(await runWithCodeCache(file, { dir, writeAfterMs: 0 }).written).toBe(true);
    expect(dataFiles(dir)).toEqual([`${process.version}-${process.arch}-${sha256(notAHash).slice(0, 40)}.v8cache`]);
  });

  it('reads no data from a directory or file others can write, or through a symbolic link, and writes none there', async () => {
    const { file, dir } = bundle(3);
    expect(await runWithCodeCache(file, { dir, writeAfterMs: 0 }).written).toBe(true);
    const [name = ''] = dataFiles(dir);
    const data = path.join(dir, name);

    chmodSync(data, 0o622);
    expect(runWithCodeCache(file, { dir, writeAfterMs: 60_000 }).use).toBe('absent');
    chmodSync(data, 0o600);
    expect(runWithCodeCache(file, { dir, writeAfterMs: 60_000 }).use).toBe('used');

    chmodSync(dir, 0o777);
    const open = runWithCodeCache(file, { dir, writeAfterMs: 0 });
    expect(open.use).toBe('absent');
    expect(await open.written).toBe(false);
    chmodSync(dir, 0o700);

    const elsewhere = path.join(path.dirname(dir), 'elsewhere.v8cache');
    rmSync(elsewhere, { force: true });
    writeFileSync(elsewhere, '');
    rmSync(data);
    symlinkSync(elsewhere, data);
    expect(runWithCodeCache(file, { dir, writeAfterMs: 60_000 }).use).toBe('absent');
  });

  it.skipIf(process.getuid?.() !== 0)("reads no data another user owns, nor from another user's directory", async () => {
    const { file, dir } = bundle(4);
    expect(await runWithCodeCache(file, { dir, writeAfterMs: 0 }).written).toBe(true);
    const [name = ''] = dataFiles(dir);
    chownSync(path.join(dir, name), 65534, 65534);
    expect(runWithCodeCache(file, { dir, writeAfterMs: 60_000 }).use).toBe('absent');
    chownSync(path.join(dir, name), 0, 0);
    chownSync(dir, 65534, 65534);
    const theirs = runWithCodeCache(file, { dir, writeAfterMs: 0 });
    expect(theirs.use).toBe('absent');
    expect(await theirs.written).toBe(false);
  });

  it('is off with NODE_DISABLE_COMPILE_CACHE, as Node’s own compile cache is; else in the user’s cache directory', () => {
    const { file } = bundle(5);
    expect(runWithCodeCache(file, { dir: null, writeAfterMs: 0 }).use).toBe('off');
    expect(codeCacheDir('daemon', { NODE_DISABLE_COMPILE_CACHE: '1' })).toBeNull();
    expect(codeCacheDir('daemon', { XDG_CACHE_HOME: '/c' })).toBe(process.platform === 'darwin' ? path.join(os.homedir(), 'Library', 'Caches', 'sandboxd', 'daemon-code-cache') : '/c/sandboxd/daemon-code-cache');
    // One directory per bundle: writing one bundle's data removes the other data in its directory.
    expect(codeCacheDir('run', { XDG_CACHE_HOME: '/c' })).toBe(process.platform === 'darwin' ? path.join(os.homedir(), 'Library', 'Caches', 'sandboxd', 'run-code-cache') : '/c/sandboxd/run-code-cache');
    expect(codeCacheDir('run', { NODE_DISABLE_COMPILE_CACHE: '1' })).toBeNull();
  });
});
