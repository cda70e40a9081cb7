import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { Cleanup, ROOT } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const PATCH = path.join(ROOT, 'docs/integrations/llxprt.patch');
const TOUCHED = ['packages/cli/package.json', 'packages/cli/src/utils/sandbox-containers.ts', 'packages/cli/src/utils/sandbox-exec.ts'];

interface Hunk {
  oldStart: number;
  oldCount: number;
  newCount: number;
  lines: string[];
}

/**
 * Each file's hunks as the patch states them, read as git reads them: a hunk holds the lines its
 * header counts (an empty line is an empty context line); what is left over is not the hunk's.
 */
function hunksByFile(patch: string): Map<string, Hunk[]> {
  const files = new Map<string, Hunk[]>();
  let hunks: Hunk[] = [];
  let hunk: Hunk | null = null;
  let [oldLeft, newLeft] = [0, 0];
  for (const line of patch.split('\n')) {
    if (hunk !== null && (oldLeft > 0 || newLeft > 0)) {
      const body = line === '' ? ' ' : line;
      hunk.lines.push(body);
      if (!body.startsWith('+')) oldLeft -= 1;
      if (!body.startsWith('-')) newLeft -= 1;
      continue;
    }
    if (line.startsWith('diff --git ')) hunk = null;
    const file = /^\+\+\+ b\/(.+)$/.exec(line);
    const header = /^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line);
    if (file !== null) {
      hunks = [];
      files.set(file[1] ?? '', hunks);
      hunk = null;
    } else if (header !== null) {
      hunk = { oldStart: Number(header[1]), oldCount: Number(header[2] ?? '1'), newCount: Number(header[3] ?? '1'), lines: [] };
      [oldLeft, newLeft] = [hunk.oldCount, hunk.newCount];
      hunks.push(hunk);
    } else if (hunk !== null && /^[ +-]/.test(line)) {
      // A line past what the header counted: the header miscounts (the hunk check below says so).
      hunk.lines.push(line);
    }
  }
  return files;
}

/**
 * A stand-in for each touched file at llxprt-code f80a695, made from the patch's own preimage:
 * every hunk's context and removed lines at the line numbers its header names, filler between
 * them. This repository keeps none of llxprt's code; the patch was applied to the real files at
 * f80a695 and llxprt's own tests were run on the result (docs/integrations/llxprt.md). What this
 * proves is that the patch is one `git apply` takes: the hunk headers count their lines (a doc diff
 * that left context lines out was reported as "corrupt patch at line 11") and the hunks are in
 * order at the places they name.
 */
function preimageCheckout(): string {
  const dir = mkdtempSync('/tmp/sbx-llxprt-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  for (const [file, hunks] of hunksByFile(readFileSync(PATCH, 'utf8'))) {
    const lines: string[] = [];
    for (const hunk of hunks) {
      while (lines.length < hunk.oldStart - 1) lines.push(`filler line ${String(lines.length + 1)}`);
      for (const line of hunk.lines) if (!line.startsWith('+')) lines.push(line.slice(1));
    }
    lines.push('filler after the last hunk');
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), `${lines.join('\n')}\n`);
  }
  return dir;
}

/** The lines the patch adds to `file`. */
function added(file: string): string[] {
  return (hunksByFile(readFileSync(PATCH, 'utf8')).get(file) ?? []).flatMap((hunk) => hunk.lines.filter((line) => line.startsWith('+')).map((line) => line.slice(1)));
}

describe('docs/integrations/llxprt.patch, for llxprt-code f80a695', () => {
  it('every hunk header counts the lines it holds', () => {
    for (const [file, hunks] of hunksByFile(readFileSync(PATCH, 'utf8'))) {
      for (const hunk of hunks) {
        const old = hunk.lines.filter((line) => !line.startsWith('+')).length;
        const next = hunk.lines.filter((line) => !line.startsWith('-')).length;
        expect({ file, at: hunk.oldStart, old, next }).toEqual({ file, at: hunk.oldStart, old: hunk.oldCount, next: hunk.newCount });
      }
    }
  });

  it('git apply takes it, and it touches exactly the three files it names', async () => {
    const dir = preimageCheckout();
    const check = await execa('git', ['apply', '--check', '--verbose', PATCH], { cwd: dir, reject: false });
    expect({ code: check.exitCode, stderr: check.stderr }).toMatchObject({ code: 0 });
    const touched = await execa('git', ['apply', '--numstat', PATCH], { cwd: dir });
    expect(touched.stdout.split('\n').map((line) => line.split('\t')[2]).sort()).toEqual(TOUCHED);
    expect((await execa('git', ['apply', PATCH], { cwd: dir, reject: false })).exitCode).toBe(0);
    // Applied once, it does not apply again: the change is in the files.
    expect((await execa('git', ['apply', '--check', PATCH], { cwd: dir, reject: false })).exitCode).not.toBe(0);
  });

  it("loads sandboxd only on a container launch, routes its lines to llxprt's own outputs, and keeps llxprt's own steps as fallbacks", () => {
    const exec = added('packages/cli/src/utils/sandbox-exec.ts');
    const containers = added('packages/cli/src/utils/sandbox-containers.ts');
    // No value import of the adapter at the top: only its type, which the compiler erases.
    expect(exec.filter((line) => line.includes("'sandboxd/llxprt'") && /^import\b/.test(line))).toEqual(["import type { Forwarded } from 'sandboxd/llxprt';"]);
    expect(exec.join('\n')).toContain("await import('sandboxd/llxprt')");
    // What the user must see survives patchStdio(); what only debugging needs goes to the debug logger.
    expect(exec.map((line) => line.trim())).toContain('warn: (line) => writeToStderr(`sandboxd: ${line}\\n`),');
    expect(exec.map((line) => line.trim())).toContain('debug: (line) => debugLogger.debug(`sandboxd: ${line}`),');
    // llxprt's own agent step and macOS credential bridge still run when sandboxd does not carry them.
    expect(exec.join('\n')).toMatch(/sshAgentForwarded\s*\?\s*\{\}\s*:\s*await setupSshAgentForwarding\(/);
    expect(containers.map((line) => line.trim())).toContain('if (isDarwin && carriedSocketPath === undefined) {');
  });

  it('is what docs/integrations/llxprt.md shows', () => {
    const doc = readFileSync(path.join(ROOT, 'docs/integrations/llxprt.md'), 'utf8');
    expect(doc).toContain(`\`\`\`diff\n${readFileSync(PATCH, 'utf8')}\`\`\``);
  });
});
