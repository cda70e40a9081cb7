import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { isObjectId, isValidRefName } from '../../daemon/gitsync/ref-names.js';

/** What git itself says, so the rules are checked against the program they copy. */
function gitAccepts(name: string): boolean {
  try {
    execFileSync('git', ['check-ref-format', name], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const NAMES = [
  'refs/heads/main',
  'refs/heads/feature/x',
  'refs/tags/v1.0',
  'refs/heads/x;touch${IFS}/tmp/p;',
  'refs/heads/ünïcode',
  'main',
  'refs/heads/',
  'refs//heads',
  '/refs/heads/x',
  'refs/heads/.hidden',
  'refs/heads/x.lock',
  'refs/heads/a..b',
  'refs/heads/a@{b',
  '@',
  'refs/heads/a.',
  'refs/heads/a b',
  'refs/heads/a\tb',
  'refs/heads/a\nb',
  'refs/heads/a\u007fb',
  'refs/heads/a~1',
  'refs/heads/a^',
  'refs/heads/a:b',
  'refs/heads/a?',
  'refs/heads/a*',
  'refs/heads/a[b',
  'refs/heads/a\\b',
  'refs/heads/../../config',
  'refs/heads/a/.b',
  'refs/heads/@',
  'refs/heads/a@b',
  'refs/heads/-x',
];

describe('isValidRefName: git check-ref-format', () => {
  it.each(NAMES)('%j is judged as git judges it', (name) => {
    expect(isValidRefName(name)).toBe(gitAccepts(name));
  });
});

describe('isObjectId', () => {
  it('takes exactly the hex digits of the hash, lower case', () => {
    expect(isObjectId('a'.repeat(40), 40)).toBe(true);
    expect(isObjectId('a'.repeat(64), 64)).toBe(true);
    expect(isObjectId('a'.repeat(64), 40)).toBe(false);
    expect(isObjectId('A'.repeat(40), 40)).toBe(false);
    expect(isObjectId(`${'a'.repeat(39)}\n`, 40)).toBe(false);
    expect(isObjectId('g'.repeat(40), 40)).toBe(false);
  });
});
