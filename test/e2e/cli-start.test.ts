import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import module from 'node:module';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { connectionLimitFor, openFilesSoftLimit } from '../../daemon/http/connection-guard.js';
import { moduleFor } from '../../client/cli/command-modules.js';
import { CLI, Cleanup, ROOT, cli, cliEnv, makeSandbox, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** Every file of the bundled command: the entry and one bundle per command module (run's and the daemon's CommonJS). */
function bundles(): string[] {
  const entries = path.join(ROOT, 'dist/bin/entries');
  return [CLI, ...readdirSync(entries).filter((name) => name.endsWith('.js') || name.endsWith('.cjs')).map((name) => path.join(entries, name))];
}

/** The bundle of a command module: run's and the daemon's are CommonJS, run with V8's code cache (client/cli/code-cache.ts). */
function bundleOf(name: string): string {
  return path.join(ROOT, 'dist/bin/entries', name === 'daemon' || name === 'run' ? `${name}.cjs` : `${name}.js`);
}

/** What every start of the command is made of. Speed itself is only printed, by `npm run bench`. */
describe('the sandboxd command as installed (bundled CLI)', () => {
  it('is the file package.json names, runs by its shebang and knows the package version', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string; bin: Record<string, string> };
    expect(path.join(ROOT, pkg.bin.sandboxd ?? '')).toBe(CLI);
    expect(readFileSync(CLI, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect(statSync(CLI).mode & 0o111).not.toBe(0);
    expect(execFileSync(CLI, ['--version'], { encoding: 'utf8' }).trim()).toBe(pkg.version);
  });

  it("carries only the zod it uses: zod/mini, not the classic API, and no other language's messages", () => {
    const text = bundles().map((file) => readFileSync(file, 'utf8')).join('\n');
    // The classic API builds every schema with all its methods, about 15 ms of each CLI start.
    expect(text).toContain('"ZodMiniObject"');
    expect(text).not.toContain('"ZodObject"');
    // zod's English and German "invalid input" messages.
    expect(text).toContain('Invalid input');
    expect(text).not.toContain('Ungültige Eingabe');
  });

  it('has a bundle for every module a command line can name, each self-contained', () => {
    const names = ['daemon', 'start', 'stop', 'restart', 'status', 'sessions', 'tunnels', 'plan', 'run', 'install', 'uninstall', 'doctor', 'logs', 'version', '--version', '-V', '--help', undefined, 'no-such-command'];
    const modules = [...new Set(names.map(moduleFor))];
    expect(modules.sort()).toEqual(['all', 'bare', 'daemon', 'doctor', 'install', 'lifecycle', 'lists', 'logs', 'plan', 'run', 'status', 'version']);
    for (const name of modules) {
      const text = readFileSync(bundleOf(name), 'utf8');
      // No import of another file of ours: one file holds the whole command (node's builtins aside).
      expect(text.match(/(?:from|import\(|require\()\s*["']\.{1,2}\//g)).toBeNull();
    }
  });

  it('loads only what a command uses: --version no zod, neither command child_process nor fs/promises (structure, not timing)', async () => {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox);
    const probe = path.join(sandbox.dir, 'loaded.mjs');
    // zod marks globalThis when it loads; node lists the builtins it loaded.
    writeFileSync(probe, "process.on('exit', () => process.stderr.write(JSON.stringify({ zod: '__zod_globalConfig' in globalThis, builtins: process.moduleLoadList })));\n");
    const run = async (args: string[]) => {
      const result = await execa(process.execPath, ['--import', probe, ...args], { env, reject: false, extendEnv: false });
      return JSON.parse(result.stderr.slice(result.stderr.lastIndexOf('{"zod"'))) as { zod: boolean; builtins: string[] };
    };
    // Node 20 loads fs/promises while it starts; what counts is what the command adds to `node -e 0`.
    const bare = new Set((await run(['-e', '0'])).builtins);
    const loaded = async (args: string[]) => {
      const { zod, builtins } = await run([CLI, ...args]);
      const added = builtins.filter((name) => !bare.has(name));
      return { zod, childProcess: added.includes('NativeModule child_process'), fsPromises: added.includes('NativeModule internal/fs/promises') };
    };
    expect(await loaded(['--version'])).toEqual({ zod: false, childProcess: false, fsPromises: false });
    expect(await cli(['start'], env)).toMatchObject({ exitCode: 0 });
    expect(await loaded(['status'])).toEqual({ zod: true, childProcess: false, fsPromises: false });
    // run's request and answer need no zod (the answer has its generated shape), so a run loads none.
    const engine = path.join(sandbox.dir, 'engine');
    const project = path.join(sandbox.dir, 'project');
    mkdirSync(engine);
    mkdirSync(project);
    writeFileSync(path.join(engine, 'podman'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    const stubbed = { ...env, PATH: `${engine}:${env.PATH ?? ''}`, SANDBOXD_SSH_BRIDGE: 'none' };
    const ran = await execa(process.execPath, ['--import', probe, CLI, 'run', '--quiet', '--engine', 'podman', '--', '--rm', 'image', 'true'], { env: stubbed, reject: false, extendEnv: false, cwd: project });
    expect(ran.exitCode).toBe(0);
    expect(JSON.parse(ran.stderr.slice(ran.stderr.lastIndexOf('{"zod"'))) as { zod: boolean }).toMatchObject({ zod: false });
  });

  it("the daemon's bundle leaves out fastify's JSON-schema compilers, and its start loads neither TLS nor HTTP/2 (structure, not timing)", async () => {
    const text = readFileSync(path.join(ROOT, 'dist/bin/entries/daemon.cjs'), 'utf8');
    expect(text).toContain('node_modules/fastify/fastify.js');
    expect(text).not.toContain('node_modules/ajv/');
    expect(text).not.toContain('node_modules/fast-json-stringify/index.js');
    const sandbox = makeSandbox(cleanup);
    const probe = path.join(sandbox.dir, 'loaded.mjs');
    writeFileSync(probe, "process.on('exit', () => process.stderr.write(JSON.stringify({ builtins: process.moduleLoadList })));\n");
    const daemon = execa(process.execPath, ['--import', probe, CLI, 'daemon'], { env: cliEnv(sandbox), reject: false, extendEnv: false });
    cleanup.add(() => daemon.kill('SIGKILL'));
    await waitFor(() => existsSync(path.join(sandbox.env.SANDBOXD_RUNTIME_DIR, 'sandboxd.sock')), 'the daemon to listen');
    daemon.kill('SIGTERM');
    const { stderr } = await daemon;
    const { builtins } = JSON.parse(stderr.slice(stderr.lastIndexOf('{"builtins"'))) as { builtins: string[] };
    expect(builtins).toContain('NativeModule http');
    expect(builtins.filter((name) => /^NativeModule (tls|https|http2|_tls_wrap)$/.test(name))).toEqual([]);
  });

  it("starts the daemon from V8's code cache once a daemon wrote it, in the user's own cache directory", async () => {
    const sandbox = makeSandbox(cleanup);
    const cacheHome = path.join(sandbox.dir, 'cache');
    const env = cliEnv(sandbox, { XDG_CACHE_HOME: cacheHome });
    delete env.NODE_DISABLE_COMPILE_CACHE;
    const dir = path.join(cacheHome, 'sandboxd', 'daemon-code-cache');
    const codeCache = () =>
      readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8')
        .split('\n')
        .filter((line) => line.includes('"msg":"listening"'))
        .map((line) => (JSON.parse(line) as { codeCache: unknown }).codeCache);
    expect(await cli(['start'], env)).toMatchObject({ exitCode: 0 });
    // Written once the daemon has started and answered (2 s after its start).
    await waitFor(() => existsSync(dir) && readdirSync(dir).some((name) => name.endsWith('.v8cache')), 'the code cache to be written', 30_000);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(await cli(['restart'], env)).toMatchObject({ exitCode: 0 });
    expect(await cli(['status'], env)).toMatchObject({ exitCode: 0 });
    expect(codeCache()).toEqual(['absent', 'used']);
  });

  it("runs `run` from V8's code cache once a run wrote it as it exited, in the user's own cache directory", async () => {
    const sandbox = makeSandbox(cleanup);
    const cacheHome = path.join(sandbox.dir, 'cache');
    const engine = path.join(sandbox.dir, 'engine');
    const project = path.join(sandbox.dir, 'project');
    mkdirSync(engine);
    mkdirSync(project);
    writeFileSync(path.join(engine, 'podman'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    const env = cliEnv(sandbox, { XDG_CACHE_HOME: cacheHome, PATH: `${engine}:${process.env.PATH ?? ''}`, SANDBOXD_SSH_BRIDGE: 'none' });
    delete env.NODE_DISABLE_COMPILE_CACHE;
    const dir = path.join(cacheHome, 'sandboxd', 'run-code-cache');
    const data = (): string[] => (existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith('.v8cache')) : []);
    const run = () => cli(['run', '--quiet', '--engine', 'podman', '--', '--rm', 'image', 'true'], env, 30_000, project);
    expect(await run()).toMatchObject({ exitCode: 0 });
    // Written as the first run exited, named by the bundle's SHA-256, which the build wrote on its last line.
    const sha256 = /\n\/\/ sandboxd-sha256 ([0-9a-f]{64})\n$/.exec(readFileSync(bundleOf('run'), 'utf8'))?.[1] ?? 'none';
    expect(data()).toEqual([`${process.version}-${process.arch}-${sha256.slice(0, 40)}.v8cache`]);
    const file = path.join(dir, data()[0] ?? '');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const written = statSync(file);
    // The next run takes it: data V8 refused, or none, would be written again (a new file, renamed into place).
    expect(await run()).toMatchObject({ exitCode: 0 });
    expect(statSync(file)).toMatchObject({ ino: written.ino, mtimeMs: written.mtimeMs });
  });

  it("keeps Node's compile cache in the user's own cache directory, never a shared one", async () => {
    const sandbox = makeSandbox(cleanup);
    const cacheHome = path.join(sandbox.dir, 'cache');
    const own = path.join(cacheHome, 'sandboxd', 'node-compile-cache');
    const supported = typeof (module as { enableCompileCache?: unknown }).enableCompileCache === 'function';
    const version = await cli(['--version'], cliEnv(sandbox, { XDG_CACHE_HOME: cacheHome, NODE_COMPILE_CACHE: '' }));
    expect(version.exitCode).toBe(0);
    // An explicit NODE_COMPILE_CACHE (even empty) is the user's choice: ours stays unused.
    expect(existsSync(own)).toBe(false);
    const env = cliEnv(sandbox, { XDG_CACHE_HOME: cacheHome });
    delete env.NODE_COMPILE_CACHE;
    expect((await cli(['--version'], env)).exitCode).toBe(0);
    expect(existsSync(own)).toBe(supported);
  });

  it('reads the open-files limit without a diagnostic report: the soft limit ulimit shows', () => {
    const soft = execFileSync('sh', ['-c', 'ulimit -Sn'], { encoding: 'utf8' }).trim();
    expect(openFilesSoftLimit()).toBe(soft === 'unlimited' ? null : Number(soft));
    expect(connectionLimitFor(1024)).toBe(256);
  });
});
