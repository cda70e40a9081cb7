import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import module from 'node:module';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { connectionLimitFor, openFilesSoftLimit } from '../../daemon/http/connection-guard.js';
import { moduleFor } from '../../client/cli/command-modules.js';
import { CLI, Cleanup, ROOT, cli, cliEnv, makeSandbox } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** Every file of the bundled command: the entry and one bundle per command module. */
function bundles(): string[] {
  const entries = path.join(ROOT, 'dist/bin/entries');
  return [CLI, ...readdirSync(entries).filter((name) => name.endsWith('.js')).map((name) => path.join(entries, name))];
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
      const text = readFileSync(path.join(ROOT, 'dist/bin/entries', `${name}.js`), 'utf8');
      // No import of another file of ours: one file holds the whole command (node's builtins aside).
      expect(text.match(/(?:from|import\()\s*["']\.{1,2}\//g)).toBeNull();
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
