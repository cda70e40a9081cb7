import { describe, expect, it } from 'vitest';
import { globalConfigFiles, parseConfigList } from '../../daemon/plan/git-config.js';

/** What `git config --list --show-origin --show-scope --includes -z` printed for a real home. */
const listing = [
  'global', 'file:/h/.config/git/config', 'color.ui\nauto',
  'global', 'file:/h/.gitconfig', 'include.path\ninc/a.inc',
  'global', 'file:/h/inc/a.inc', 'user.email\nnested@example.com',
  'global', 'file:/h/.gitconfig', 'includeif.gitdir:/work/.path\n~/work.inc',
  'global', 'file:/h/.gitconfig', 'include.path\n/h/.git-credentials',
  'global', 'file:/h/.gitconfig', 'credential.helper\nstore',
  'global', 'file:/h/.gitconfig', 'core.excludesfile\n~/.gitignore_global',
  'global', 'file:/h/.gitconfig', 'commit.template\n/h/tmpl.txt',
  'global', 'file:/h/.gitconfig', 'core.bare',
  'local', 'file:/repo/.git/config', 'core.filemode\ntrue',
  '',
].join('\0');

describe('git global config files', () => {
  it('parses records, including keys without a value', () => {
    const entries = parseConfigList(listing);
    expect(entries).toHaveLength(10);
    expect(entries[8]).toEqual({ scope: 'global', file: '/h/.gitconfig', key: 'core.bare', value: null });
  });

  it('lists every file git reads for the global scope and what they name, never credential stores', () => {
    const { files } = globalConfigFiles(parseConfigList(listing), '/h', '/h/.config', '/repo');
    expect(files).toEqual([
      '/h/.config/git/config',
      '/h/.gitconfig',
      '/h/inc/a.inc',
      '/h/work.inc',
      '/h/.gitignore_global',
      '/h/tmpl.txt',
      '/h/.config/git/attributes',
    ]);
    expect(files).not.toContain('/h/.git-credentials');
  });

  it('falls back to the XDG ignore file when core.excludesFile is unset', () => {
    const { files } = globalConfigFiles(parseConfigList(['global', 'file:/h/.gitconfig', 'user.name\nx', ''].join('\0')), '/h', '/x', '/');
    expect(files).toEqual(['/h/.gitconfig', '/x/git/ignore', '/x/git/attributes']);
  });
});
