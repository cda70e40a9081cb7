import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { rotateLog } from '../../daemon/logger.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('rotateLog', () => {
  it('moves a log past the limit aside, replacing the previous one, and leaves small logs alone', async () => {
    const dir = mkdtempSync('/tmp/sbx-log-');
    dirs.push(dir);
    const log = path.join(dir, 'sandboxd.log');
    expect(await rotateLog(log, 10)).toBe(false);
    writeFileSync(log, 'short');
    expect(await rotateLog(log, 10)).toBe(false);
    writeFileSync(`${log}.1`, 'oldest');
    writeFileSync(log, 'long enough to rotate');
    expect(await rotateLog(log, 10)).toBe(true);
    expect(existsSync(log)).toBe(false);
    expect(readFileSync(`${log}.1`, 'utf8')).toBe('long enough to rotate');
  });
});
