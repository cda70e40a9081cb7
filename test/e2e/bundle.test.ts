import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, ROOT, cliEnv, daemonsFor, makeSandbox } from '../helpers.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

const BUN = path.join(ROOT, 'node_modules/.bin/bun');

/** A CLI like llxprt: it imports the client, and is shipped as one file without sandboxd's layout. */
const ENTRY = `
import { acquireSession } from ${JSON.stringify(path.join(ROOT, 'dist/client/index.js'))};
try {
  const session = await acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false });
  console.log(JSON.stringify({ ok: true, runtime: process.versions.bun === undefined ? 'node' : 'bun', gd: session.plan.env.GIT_DISCOVERY_ACROSS_FILESYSTEM }));
  await session.release();
} catch (error) {
  console.log(JSON.stringify({ ok: false, code: error.code, message: error.message }));
}
`;

/**
 * esbuild's ESM output has no \`require\`, which the client's CommonJS dependencies call for Node's
 * built-ins; a bundler gives it one (docs/integrations/llxprt.md).
 */
const REQUIRE_BANNER = "import { createRequire as __sandboxdCreateRequire } from 'node:module'; const require = __sandboxdCreateRequire(import.meta.url);";

describe('a bundled client, run from elsewhere, under Node and Bun', () => {
  let dir: string;
  let bundle: string;
  let binDir: string;
  let elsewhere: string;

  beforeAll(async () => {
    dir = mkdtempSync('/tmp/sbx-bundle-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    writeFileSync(path.join(dir, 'entry.mjs'), ENTRY);
    bundle = path.join(dir, 'out', 'llxprt-like.mjs');
    await build({ entryPoints: [path.join(dir, 'entry.mjs')], bundle: true, platform: 'node', format: 'esm', target: 'node20', outfile: bundle, banner: { js: REQUIRE_BANNER }, logLevel: 'silent' });
    // How an installed sandboxd looks on PATH or in SANDBOXD_BIN: an executable that runs the CLI.
    binDir = path.join(dir, 'bin');
    mkdirSync(binDir);
    writeFileSync(path.join(binDir, 'sandboxd'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"\n`, { mode: 0o755 });
    elsewhere = path.join(dir, 'elsewhere');
    mkdirSync(elsewhere);
  });

  async function runBundle(runtime: string, extra: Record<string, string>) {
    const sandbox = makeSandbox(cleanup);
    const result = await execa(runtime, [bundle], { cwd: elsewhere, env: cliEnv(sandbox, { PATH: '/usr/bin:/bin', ...extra }), extendEnv: false, reject: false, timeout: 45_000 });
    expect(result.stderr).toBe('');
    return { output: JSON.parse(result.stdout) as Record<string, unknown>, daemons: daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR) };
  }

  it.each([
    ['Node', 'SANDBOXD_BIN', process.execPath, 'node'],
    ['Node', 'PATH', process.execPath, 'node'],
    ['Bun', 'SANDBOXD_BIN', BUN, 'bun'],
    ['Bun', 'PATH', BUN, 'bun'],
  ])('%s: auto-starts the daemon found through %s and acquires a plan', async (_name, through, runtime, expected) => {
    const extra: Record<string, string> = through === 'PATH' ? { PATH: `${binDir}:/usr/bin:/bin` } : { SANDBOXD_BIN: path.join(binDir, 'sandboxd') };
    const { output, daemons } = await runBundle(runtime, extra);
    expect(output).toEqual({ ok: true, runtime: expected, gd: '1' });
    expect(daemons).toHaveLength(1);
  });

  it.each([
    ['Node', process.execPath],
    ['Bun', BUN],
  ])('%s: with no sandboxd anywhere it says what it tried, and starts nothing', async (_name, runtime) => {
    const { output, daemons } = await runBundle(runtime, {});
    expect(output).toMatchObject({ ok: false, code: 'DAEMON_START_FAILED' });
    expect(output.message).toContain('cannot find the sandboxd executable');
    expect(daemons).toEqual([]);
  });
});
