import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, ROOT, cli, cliEnv, daemonsFor, makeSandbox, startAgent, type Agent } from '../helpers.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

const BUN = path.join(ROOT, 'node_modules/.bin/bun');
const RUNTIMES = { Node: process.execPath, Bun: BUN } as const;

/**
 * A CLI like llxprt: it imports `sandboxd/llxprt` and runs its agent step on an argument list of
 * its own, and is shipped as one file without sandboxd's layout.
 */
const ENTRY = `
import { forwardThroughSandboxd } from ${JSON.stringify(path.join(ROOT, 'dist/client/llxprt/index.js'))};
const args = ['run', '--rm', '--volume', '/srv:/srv'];
const lines = [];
const log = { warn: (line) => lines.push(line), debug: (line) => lines.push('debug: ' + line) };
const forwarded = (await forwardThroughSandboxd({ command: 'podman' }, args, { cwd: process.cwd(), log })).sshAgent;
console.log(JSON.stringify({ forwarded, runtime: process.versions.bun === undefined ? 'node' : 'bun', agent: args.includes('SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock'), lines }));
`;

interface Outcome {
  forwarded: boolean;
  runtime: string;
  agent: boolean;
  lines: string[];
}

describe('a bundled client, with no banner and nothing configured, run from elsewhere under Node and Bun', () => {
  let dir: string;
  let bundles: Record<'esbuild' | 'bun build', string>;
  let bare: Record<'esbuild' | 'bun build', string>;
  let binDir: string;
  let elsewhere: string;
  let agent: Agent;

  beforeAll(async () => {
    dir = mkdtempSync('/tmp/sbx-bundle-');
    const bareDir = mkdtempSync('/tmp/sbx-bare-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
      rmSync(bareDir, { recursive: true, force: true });
    });
    writeFileSync(path.join(dir, 'entry.mjs'), ENTRY);
    const out = path.join(dir, 'out');
    bundles = { esbuild: path.join(out, 'esbuild.mjs'), 'bun build': path.join(out, 'bun.mjs') };
    // As llxprt ships: ESM, no banner giving the bundle a `require`.
    await build({ entryPoints: [path.join(dir, 'entry.mjs')], bundle: true, platform: 'node', format: 'esm', target: 'node20', outfile: bundles.esbuild, logLevel: 'silent' });
    await execa(BUN, ['build', path.join(dir, 'entry.mjs'), '--target=node', '--outfile', bundles['bun build']]);
    // The program installed sandboxd beside itself, as a dependency: `<program>/node_modules/sandboxd`.
    mkdirSync(path.join(dir, 'node_modules'));
    symlinkSync(ROOT, path.join(dir, 'node_modules', 'sandboxd'));
    // The same bundles where no sandboxd package is anywhere above them.
    mkdirSync(path.join(bareDir, 'out'));
    bare = { esbuild: path.join(bareDir, 'out', 'esbuild.mjs'), 'bun build': path.join(bareDir, 'out', 'bun.mjs') };
    for (const name of ['esbuild', 'bun build'] as const) copyFileSync(bundles[name], bare[name]);
    // How an installed sandboxd looks on PATH or in SANDBOXD_BIN: an executable that runs the CLI.
    binDir = path.join(dir, 'bin');
    mkdirSync(binDir);
    writeFileSync(path.join(binDir, 'sandboxd'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"\n`, { mode: 0o755 });
    elsewhere = path.join(dir, 'elsewhere');
    mkdirSync(elsewhere);
    agent = await startAgent(dir, cleanup);
  });

  async function runBundle(bundle: string, runtime: string, extra: Record<string, string>) {
    const sandbox = makeSandbox(cleanup);
    const env = cliEnv(sandbox, { PATH: '/usr/bin:/bin', SSH_AUTH_SOCK: agent.socket, ...extra });
    const result = await execa(runtime, [bundle], { cwd: elsewhere, env, extendEnv: false, reject: false, timeout: 45_000 });
    expect(result.stderr).toBe('');
    return { outcome: JSON.parse(result.stdout) as Outcome, env, sandbox };
  }

  it.each(['esbuild', 'bun build'] as const)('%s: the bundle carries no dynamic require', (name) => {
    const text = readFileSync(bundles[name], 'utf8');
    expect(text).not.toContain('Dynamic require');
    expect(text).not.toMatch(/\b__require\(/);
  });

  it.each([
    ['esbuild', 'Node'],
    ['esbuild', 'Bun'],
    ['bun build', 'Node'],
    ['bun build', 'Bun'],
  ] as const)('%s, run by %s: auto-starts the sandboxd installed beside the program and merges the plan', async (bundler, runtime) => {
    const { outcome, env } = await runBundle(bundles[bundler], RUNTIMES[runtime], {});
    expect(outcome).toEqual({ forwarded: true, runtime: runtime.toLowerCase(), agent: true, lines: [] });
    expect((await cli(['status', '--json'], env)).exitCode).toBe(0);
  });

  it.each([
    ['esbuild', 'Node', 'SANDBOXD_BIN'],
    ['bun build', 'Bun', 'PATH'],
  ] as const)('%s, run by %s, from a bare directory: finds sandboxd through %s', async (bundler, runtime, through) => {
    const extra: Record<string, string> = through === 'PATH' ? { PATH: `${binDir}:/usr/bin:/bin` } : { SANDBOXD_BIN: path.join(binDir, 'sandboxd') };
    const { outcome, sandbox } = await runBundle(bare[bundler], RUNTIMES[runtime], extra);
    expect(outcome).toMatchObject({ forwarded: true, agent: true });
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toHaveLength(1);
  });

  it.each([
    ['esbuild', 'Node'],
    ['bun build', 'Bun'],
  ] as const)('%s, run by %s, with no sandboxd anywhere: says where it looked, starts nothing, leaves the agent to llxprt', async (bundler, runtime) => {
    const { outcome, sandbox } = await runBundle(bare[bundler], RUNTIMES[runtime], {});
    expect(outcome).toMatchObject({ forwarded: false, agent: false });
    expect(outcome.lines).toEqual([
      `not used, llxprt forwards the agent and the credential proxy itself: cannot find the sandboxd executable. Looked at: the daemonCommand option (not given), SANDBOXD_BIN (not set), \`sandboxd\` in PATH (/usr/bin:/bin); no sandboxd package with a built dist/bin/sandboxd.js in ${path.dirname(bare[bundler])} or any directory above it, or in their node_modules (Set SANDBOXD_BIN to the path of the \`sandboxd\` executable, or put \`sandboxd\` on PATH.)`,
    ]);
    expect(daemonsFor(sandbox.env.SANDBOXD_RUNTIME_DIR)).toEqual([]);
  });
});
