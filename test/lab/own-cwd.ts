import { mkdtempSync, rmSync } from 'node:fs';
import { afterAll } from 'vitest';
import { ROOT } from '../helpers.js';

/**
 * Each test file runs in an empty directory of its own, never in this repository: a client's
 * default cwd is what the daemon plans for and guards, so a `plan`, `run` or acquire that names no
 * cwd would otherwise make the daemon watch this repository's `.git` and mount its work tree. A
 * test that wants a repository makes one under its own temp dir and names it.
 */
const dir = mkdtempSync('/tmp/sbx-cwd-');
process.chdir(dir);
afterAll(() => {
  process.chdir(ROOT);
  rmSync(dir, { recursive: true, force: true });
});
