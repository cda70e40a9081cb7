import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { disallowedEntries, type ConfigContext } from '../../daemon/guard/config-rules.js';
import { entryName, parseConfigText } from '../../daemon/guard/config-text.js';

const dir = mkdtempSync(path.join(tmpdir(), 'sbx-config-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** What git itself reads from a config file: `name=value` lines (`name` alone for a bare key), or null when git refuses it. */
function gitReads(text: string): string[] | null {
  const file = path.join(dir, 'config');
  writeFileSync(file, text);
  const result = spawnSync('git', ['config', '--file', file, '--no-includes', '--list', '-z'], { cwd: dir, encoding: 'utf8', env: { PATH: process.env.PATH ?? '', HOME: dir, GIT_CONFIG_NOSYSTEM: '1' } });
  if (result.status !== 0) return null;
  return result.stdout
    .split('\0')
    .filter((record) => record !== '')
    .map((record) => {
      const newline = record.indexOf('\n');
      return newline === -1 ? record : `${record.slice(0, newline)}=${record.slice(newline + 1)}`;
    });
}

function weRead(text: string): string[] | null {
  const parsed = parseConfigText(text);
  return parsed.error !== null ? null : parsed.entries.map((entry) => (entry.value === null ? entryName(entry) : `${entryName(entry)}=${entry.value}`));
}

const CORPUS: Record<string, string> = {
  'plain sections and keys': '[core]\n\trepositoryformatversion = 0\n\tbare = false\n',
  'case: sections and keys fold, subsections keep case': '[Remote "Origin"]\n\tURL = x\n[CORE]\n\tHooksPath=/x\n',
  'legacy dotted subsection folds to lower case': '[branch.Main]\n\tremote = origin\n',
  'bare key is boolean true': '[core]\n\tbare\n',
  'quotes, escapes and inner comments': '[alias]\n\tst = "!git status ; echo \\"x\\" # not a comment"\n\tlg = log --oneline # a comment\n',
  'escaped newline continues the value': '[core]\n\tfsmonitor = touch \\\n/tmp/x\n',
  'tabs and runs of spaces inside a value': '[user]\n\tname =  A   B\t C  \n',
  'escape sequences \\t \\n \\b': '[x]\n\ty = a\\tb\\nc\\bd\n',
  'subsection with escaped quote and backslash': '[remote "a\\"b\\\\c"]\n\turl = x\n',
  'header and key on one line': '[core] bare = true\n',
  'comments of both kinds and blank lines': '# top\n; also\n\n[core]\n  # indented\n\tbare = true ; trailing\n',
  'CRLF line ends': '[core]\r\n\tbare = true\r\n',
  'no newline at the end': '[core]\n\tbare = true',
  'BOM': '\uFEFF[core]\n\tbare = true\n',
  'include and includeIf': '[include]\n\tpath = ../team.gitconfig\n[includeIf "gitdir:~/work/"]\n\tpath = work.inc\n',
  'empty value': '[core]\n\thooksPath =\n',
  'a key before any section (git reads it, naming no section)': 'bare = true\n',
  'refused: unknown escape': '[core]\n\tx = a\\qb\n',
  'refused: unterminated quote': '[core]\n\tx = "abc\n',
  'refused: bad header': '[core\n\tx = 1\n',
  'refused: key starting with a digit': '[core]\n\t1x = 1\n',
  'refused: unquoted subsection with a space': '[remote origin]\n\turl = x\n',
};

describe('git config syntax, read as git reads it (compared with git itself)', () => {
  for (const [name, text] of Object.entries(CORPUS)) {
    it(name, () => {
      expect(weRead(text)).toEqual(gitReads(text));
    });
  }
});

describe('what a config that appeared during a session may hold', () => {
  const context: ConfigContext = { knownUrls: new Set(['/src/lib-remote']), workTreeOk: (value) => value === '../../../lib' };
  const reasons = (text: string) => disallowedEntries(parseConfigText(text).entries, context, 10);

  it('allows what git clone, init, submodule update and worktree add write', () => {
    expect(
      reasons(
        `[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n\tworktree = ../../../lib\n` +
          '[remote "origin"]\n\turl = /src/lib-remote\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n' +
          '[remote "gh"]\n\turl = https://github.com/x/y.git\n[remote "scp"]\n\turl = git@github.com:x/y.git\n[submodule "lib"]\n\turl = ssh://host/lib\n\tactive = true\n\tupdate = rebase\n' +
          '[extensions]\n\tobjectformat = sha256\n[user]\n\temail = a@b\n',
      ),
    ).toEqual([]);
  });

  it('refuses anything that runs a program, redirects git, or copies a local repository in', () => {
    expect(
      reasons(
        '[core]\n\tfsmonitor = x\n\thooksPath = /tmp\n\tsshCommand = x\n\tpager = x\n\tworktree = /home/u\n[alias]\n\tst = !x\n[filter "lfs"]\n\tclean = x\n[diff "x"]\n\ttextconv = x\n' +
          '[include]\n\tpath = x\n[remote "origin"]\n\tuploadpack = x\n\turl = ext::sh -c x\n[remote "local"]\n\turl = /home/u/secret\n[remote "file"]\n\turl = file:///home/u/secret\n' +
          '[credential]\n\thelper = x\n[submodule "s"]\n\tupdate = !x\n[gpg]\n\tprogram = x\n',
      ),
    ).toEqual([
      'core.fsmonitor is not a key git writes by itself',
      'core.hookspath is not a key git writes by itself',
      'core.sshcommand is not a key git writes by itself',
      'core.pager is not a key git writes by itself',
      'core.worktree names another work tree',
      'alias.st is not a key git writes by itself',
      'filter.lfs.clean is not a key git writes by itself',
      'diff.x.textconv is not a key git writes by itself',
      'include.path is not a key git writes by itself',
      'remote.origin.uploadpack is not a key git writes by itself',
    ]);
    expect(reasons('[remote "origin"]\n\turl = ext::sh -c x\n')).toEqual(['remote.origin.url = ext::sh -c x is a local path or a transport command']);
    expect(reasons('[remote "local"]\n\turl = /home/u/secret\n')).toEqual(['remote.local.url = /home/u/secret is a local path or a transport command']);
    expect(reasons('[remote "file"]\n\turl = file:///home/u/secret\n')).toHaveLength(1);
    expect(reasons('[remote "dash"]\n\turl = -oProxyCommand=x:y\n')).toHaveLength(1);
    expect(reasons('[submodule "s"]\n\tupdate = !x\n')).toEqual(['submodule.s.update = !x can run a command']);
    expect(reasons('[credential]\n\thelper = x\n[gpg]\n\tprogram = x\n')).toEqual(['credential.helper is not a key git writes by itself', 'gpg.program is not a key git writes by itself']);
  });
});
