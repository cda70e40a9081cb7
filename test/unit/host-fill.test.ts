import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { hostFill } from '../../daemon/credentials/host-fill.js';
import { createSubprocessRunner } from '../../daemon/os/subprocess.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A user's HOME whose git config names `helpers` (in order), with the real git and a real runner. */
function home(helpers: string[], credentials = ''): string {
  const dir = mkdtempSync('/tmp/sbx-fill-');
  dirs.push(dir);
  writeFileSync(path.join(dir, '.gitconfig'), ['[credential]', ...helpers.map((helper) => `\thelper = "${helper.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`), ''].join('\n'));
  writeFileSync(path.join(dir, '.git-credentials'), credentials);
  return dir;
}

const run = createSubprocessRunner();
const PATH = process.env.PATH ?? '/usr/bin:/bin';

describe("the host's git credential fill (real git)", () => {
  it("answers from the user's own helpers, with the username git named", async () => {
    const dir = home(['store'], 'https://me:tok-1@git.example.com:8443\n');
    expect(await hostFill(run, { hostHome: dir, path: PATH }, { protocol: 'https', host: 'git.example.com:8443', username: 'me' })).toEqual({
      ok: true,
      answer: { username: 'me', password: 'tok-1' },
    });
  });

  it('never prompts: with no credential it fails at once with git\'s reason', async () => {
    const dir = home(['store']);
    const result = await hostFill(run, { hostHome: dir, path: PATH }, { protocol: 'https', host: 'git.example.com' });
    expect(result).toEqual({ ok: false, reason: expect.stringContaining('terminal prompts disabled') as string });
  });

  it('a helper hears only the checked query, and has no terminal to open', async () => {
    const dir = home([`!f() { cat > ${path.join('$HOME', 'heard')}; if ( : < /dev/tty ) 2>/dev/null; then echo tty=yes >> $HOME/heard; fi; }; f`]);
    await hostFill(run, { hostHome: dir, path: PATH }, { protocol: 'https', host: 'git.example.com', username: 'me', path: 'org/repo.git' });
    // git passes the path on only where the user's config sets credential.useHttpPath.
    expect(readFileSync(path.join(dir, 'heard'), 'utf8')).toBe('protocol=https\nhost=git.example.com\nusername=me\n');
  });
});
