import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Linter } from 'eslint';
import tseslint from 'typescript-eslint';
import { afterEach, describe, expect, it } from 'vitest';
import { boundariesPlugin, readImportGraph, violations } from '../../scripts/eslint-boundaries.js';
import { ROOT } from '../helpers.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A tree of its own, so the rule is shown failing on real files without touching the repository's. */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'sbx-boundaries-'));
  dirs.push(root);
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    writeFileSync(path.join(root, file), text);
  }
  return root;
}

/** What `eslint` reports for one file of `root` under the rule, as the repository's config runs it. */
function lint(root: string, file: string, text: string): string[] {
  const linter = new Linter({ configType: 'flat', cwd: root });
  const config: Linter.Config[] = [
    { files: ['**/*.ts'], languageOptions: { parser: tseslint.parser }, plugins: { sandboxd: boundariesPlugin }, rules: { 'sandboxd/boundaries': 'error' } },
  ];
  return linter.verify(text, config, { filename: path.join(root, file) }).map((message) => message.message);
}

const LAYERED = {
  'shared/errors.ts': 'export const E = 1;\n',
  'daemon/os/text.ts': "import { E } from '../../shared/errors.js';\nexport const T = E;\n",
  'daemon/sessions/registry.ts': "import { T } from '../os/text.js';\nexport const R = T;\n",
  'client/session.ts': "import { T } from '../daemon/os/text.js';\nexport const S = T;\n",
};

describe('the layout rule (sandboxd/boundaries)', () => {
  it('holds for the repository as it is', () => {
    expect(violations(readImportGraph(ROOT))).toEqual([]);
  });

  it('passes a tree whose folders import one way', () => {
    const root = tree(LAYERED);
    for (const [file, text] of Object.entries(LAYERED)) expect(lint(root, file, text)).toEqual([]);
  });

  it('fails a deliberately added cycle between two folders, even through a type-only import', () => {
    const text = "import type { R } from '../sessions/registry.js';\nexport const T = 1;\nexport type X = typeof R;\n";
    const root = tree({ ...LAYERED, 'daemon/os/text.ts': text });
    expect(lint(root, 'daemon/os/text.ts', text)).toEqual([
      'imports daemon/sessions/registry.ts: closes a loop between the folders daemon/os, daemon/sessions',
      'imports daemon/sessions/registry.ts: closes a loop between the modules daemon/os/text.ts, daemon/sessions/registry.ts',
    ]);
    expect(lint(root, 'daemon/sessions/registry.ts', LAYERED['daemon/sessions/registry.ts'])).toEqual([
      'imports daemon/os/text.ts: closes a loop between the folders daemon/os, daemon/sessions',
      'imports daemon/os/text.ts: closes a loop between the modules daemon/os/text.ts, daemon/sessions/registry.ts',
    ]);
  });

  it('fails two modules of one folder that import each other', () => {
    const a = "export { B } from './b.js';\nexport const A = 1;\n";
    const root = tree({ ...LAYERED, 'daemon/os/a.ts': a, 'daemon/os/b.ts': "import { A } from './a.js';\nexport const B = A;\n" });
    expect(lint(root, 'daemon/os/a.ts', a)).toEqual(['imports daemon/os/b.ts: closes a loop between the modules daemon/os/a.ts, daemon/os/b.ts']);
  });

  it('fails a client module importing the daemon outside its surface, even lazily', () => {
    const text = "export async function load(): Promise<unknown> {\n  return import('../daemon/sessions/registry.js');\n}\n";
    const root = tree({ ...LAYERED, 'client/session.ts': text });
    expect(lint(root, 'client/session.ts', text)).toEqual([
      'imports daemon/sessions/registry.ts: the client reaches the daemon only through CLIENT_SURFACE (scripts/eslint-boundaries.js)',
    ]);
  });

  it('fails shared/ importing the daemon, and the daemon importing the client', () => {
    const shared = "import { T } from '../daemon/os/text.js';\nexport const E = T;\n";
    const daemon = "import { S } from '../../client/session.js';\nexport const R = S;\n";
    const root = tree({ ...LAYERED, 'shared/errors.ts': shared, 'daemon/sessions/registry.ts': daemon });
    expect(lint(root, 'shared/errors.ts', shared)).toContain('imports daemon/os/text.ts: shared/ imports only shared/');
    expect(lint(root, 'daemon/sessions/registry.ts', daemon)).toContain('imports client/session.ts: the daemon never imports the client');
  });
});
