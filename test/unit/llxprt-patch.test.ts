import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, ROOT } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/**
 * The files docs/integrations/llxprt.patch touches, as they are at llxprt-code f80a695 (the git
 * blob of each, `git ls-tree f80a695 <path>`). The fixture holds them under `<path>.orig`, so no
 * tool of this repository reads them as its own.
 */
const TOUCHED: Record<string, string> = {
  'packages/cli/package.json': '4f19cc4dab694087fb0ae1ddb6c8552ec3203128',
  'packages/cli/src/utils/sandbox-containers.ts': '2315582cdbdd2edc23d4ac2f36a9e9769ff14575',
  'packages/cli/src/utils/sandbox-exec.ts': '3254faf8150c53d9f2bc7e7ad27b39064bb93ef8',
};
const FIXTURE = path.join(ROOT, 'test/fixtures/llxprt-f80a695');
const PATCH = path.join(ROOT, 'docs/integrations/llxprt.patch');

/** A copy of llxprt's touched files at f80a695, at their own paths. */
function checkout(): string {
  const dir = mkdtempSync('/tmp/sbx-llxprt-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  for (const file of Object.keys(TOUCHED)) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    copyFileSync(path.join(FIXTURE, `${file}.orig`), path.join(dir, file));
  }
  return dir;
}

/** The body of `function name(` in `source`, up to the next top-level declaration. */
function functionBody(source: string, name: string): string {
  const start = source.indexOf(`function ${name}(`);
  expect(start).toBeGreaterThan(-1);
  const end = source.indexOf('\n}\n', start);
  return source.slice(start, end);
}

describe('docs/integrations/llxprt.patch, on llxprt-code f80a695', () => {
  it('the fixture is the files it touches, as they are at f80a695', async () => {
    for (const [file, blob] of Object.entries(TOUCHED)) {
      const hashed = await execa('git', ['hash-object', path.join(FIXTURE, `${file}.orig`)]);
      expect({ file, blob: hashed.stdout }).toEqual({ file, blob });
    }
  });

  it('git apply takes it, and it touches exactly those files', async () => {
    const dir = checkout();
    const check = await execa('git', ['apply', '--check', '--verbose', PATCH], { cwd: dir, reject: false });
    expect({ code: check.exitCode, stderr: check.stderr }).toMatchObject({ code: 0 });
    const touched = await execa('git', ['apply', '--numstat', PATCH], { cwd: dir });
    expect(touched.stdout.split('\n').map((line) => line.split('\t')[2]).sort()).toEqual(Object.keys(TOUCHED).sort());
    expect((await execa('git', ['apply', PATCH], { cwd: dir, reject: false })).exitCode).toBe(0);
    // Applied once, it does not apply again: the change is in the files.
    expect((await execa('git', ['apply', '--check', PATCH], { cwd: dir, reject: false })).exitCode).not.toBe(0);
  });

  it('loads sandboxd only on a container launch, routes its lines to llxprt\'s own outputs, and keeps llxprt\'s own steps as fallbacks', async () => {
    const dir = checkout();
    await execa('git', ['apply', PATCH], { cwd: dir });
    const exec = readFileSync(path.join(dir, 'packages/cli/src/utils/sandbox-exec.ts'), 'utf8');
    const containers = readFileSync(path.join(dir, 'packages/cli/src/utils/sandbox-containers.ts'), 'utf8');
    // No value import of the adapter at the top: only its type, which the compiler erases.
    expect(exec.split('\n').filter((line) => line.includes("'sandboxd/llxprt'") && /^import\b/.test(line))).toEqual(["import type { Forwarded } from 'sandboxd/llxprt';"]);
    const step = functionBody(exec, 'forwardThroughSandboxd');
    expect(step).toContain("await import('sandboxd/llxprt')");
    // What the user must see survives patchStdio(); what only debugging needs goes to the debug logger.
    expect(step).toContain('warn: (line) => writeToStderr(`sandboxd: ${line}\\n`)');
    expect(step).toContain('debug: (line) => debugLogger.debug(`sandboxd: ${line}`)');
    // The launch path calls it once, before llxprt's agent step, whose own forwarding still runs when sandboxd does not.
    const prepare = functionBody(exec, 'prepareContainerSandbox');
    expect(prepare.split('forwardThroughSandboxd(')).toHaveLength(2);
    expect(prepare.indexOf('forwardThroughSandboxd(')).toBeLessThan(prepare.indexOf('prepareContainerNetworkAndEnv('));
    expect(functionBody(exec, 'prepareContainerNetworkAndEnv')).toMatch(/sshAgentForwarded\s*\?\s*\{\}\s*:\s*await setupSshAgentForwarding\(/);
    expect(functionBody(containers, 'setupCredentialProxy')).toContain('if (isDarwin && carriedSocketPath === undefined) {\n      credentialProxyBridgeResult = await setupMacOSCredProxyBridge(');
  });

  it('is what docs/integrations/llxprt.md shows', () => {
    const doc = readFileSync(path.join(ROOT, 'docs/integrations/llxprt.md'), 'utf8');
    expect(doc).toContain(`\`\`\`diff\n${readFileSync(PATCH, 'utf8')}\`\`\``);
  });
});
