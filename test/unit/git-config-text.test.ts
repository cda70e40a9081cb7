import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfigList } from '../../daemon/plan/git/git-config.js';
import { quoteSubsection, quoteValue, renderConfig, splitKey, type ConfigSetting } from '../../daemon/plan/git/git-config-text.js';
import { renderGlobalConfig } from '../../daemon/plan/git/git-global.js';
import { sandboxOverrides } from '../../daemon/plan/git/git-overrides.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-gitcfg-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

let counter = 0;
/** Writes the text and reads it back as git does: `git config --file … --list -z`. */
async function readBack(text: string) {
  const file = path.join(dir, `c${String(counter++)}`);
  writeFileSync(file, text);
  const listed = await execa('git', ['config', '--file', file, '--list', '--show-origin', '--show-scope', '-z'], { env: { HOME: dir, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' } });
  return parseConfigList(listed.stdout).map(({ key, value }) => ({ key, value }));
}

/** Every C0 control character but NUL and newline, DEL, and the two characters git escapes. */
const AWKWARD = [...Array.from({ length: 31 }, (_, code) => String.fromCharCode(code + 1)).filter((char) => char !== '\n'), '\x7f', '"', '\\'];

describe('config text git reads back exactly (real git)', () => {
  it('values: every control character, quotes, backslashes, newlines, and spaces at either end', async () => {
    const values = [...AWKWARD.map((char) => `a${char}b`), 'line one\nline two', '  padded  ', '# not a comment ; nor this', '', 'ends in CR\r', 'CR LF\r\nin the middle', 'é ✓'];
    const settings: ConfigSetting[] = values.map((value) => ({ section: 's', key: 'v', value }));
    const { text, refused } = renderConfig(settings, 'test');
    expect(refused).toEqual([]);
    expect((await readBack(text)).map((entry) => entry.value)).toEqual(values);
  });

  it('subsections: a TAB (and every other control character but newline) is written as itself, which git keeps', async () => {
    const subsections = [...AWKWARD.map((char) => `https://a${char}b.example/x`), 'with.dots.in.it', '', 'MixedCase/Path'];
    const settings: ConfigSetting[] = subsections.map((subsection) => ({ section: 'credential', subsection, key: 'helper', value: 'x' }));
    const { text, refused } = renderConfig(settings, 'test');
    expect(refused).toEqual([]);
    expect((await readBack(text)).map((entry) => entry.key)).toEqual(subsections.map((subsection) => `credential.${subsection}.helper`));
  });

  it('a key without a value stays one (git\'s implicit true), distinct from an empty value', async () => {
    const { text } = renderConfig([{ section: 'core', key: 'bare', value: null }, { section: 'credential', key: 'helper', value: '' }], 'test');
    expect(await readBack(text)).toEqual([{ key: 'core.bare', value: null }, { key: 'credential.helper', value: '' }]);
  });

  it('refuses what no git config file can hold, and writes the rest', () => {
    expect(quoteSubsection('a\nb')).toBeNull();
    expect(quoteSubsection('a\0b')).toBeNull();
    expect(quoteValue('a\0b')).toBeNull();
    const bad: ConfigSetting[] = [
      { section: 'credential', subsection: 'https://a\nb', key: 'helper', value: '' },
      { section: 'bad section', key: 'x', value: '1' },
      { section: 's', key: '1x', value: '1' },
    ];
    const { text, refused } = renderConfig([...bad, { section: 's', key: 'ok', value: '1' }], 'a comment\nwith a newline');
    expect(refused).toEqual(bad);
    expect(text).toBe('# a comment with a newline\n[s]\n\tok = "1"\n');
  });

  it('splits keys as git lists them: the subsection between the first and the last dot', () => {
    expect(splitKey('core.editor')).toEqual({ section: 'core', key: 'editor' });
    expect(splitKey('url.git@github.com:.insteadof')).toEqual({ section: 'url', subsection: 'git@github.com:', key: 'insteadof' });
    expect(splitKey('s..k')).toEqual({ section: 's', subsection: '', key: 'k' });
    expect(splitKey('nodot')).toBeNull();
    expect(splitKey('s.k.')).toBeNull();
  });
});

describe('credential URLs with a TAB or capitals (real git)', () => {
  it('the reset lands on exactly that URL, so the host helper no longer runs for it', async () => {
    const urls = ['https://git.example.com/team\tone', 'https://git.example.com/MyOrg'];
    const marker = (index: number) => path.join(dir, `helper-ran-${String(index)}`);
    const host = path.join(dir, 'host.gitconfig');
    // Helpers that only leave a mark (git appends the operation, which they ignore): any program
    // but cache and store is a host program.
    writeFileSync(host, urls.map((url, index) => `[credential "${url}"]\n\thelper = "!f() { touch ${marker(index)}; }; f"\n`).join(''));
    const listed = await execa('git', ['config', '--file', host, '--list', '--show-origin', '--show-scope', '-z']);
    const entries = parseConfigList(listed.stdout).map((entry) => ({ ...entry, scope: 'global' }));
    expect(entries.map((entry) => entry.key)).toEqual(urls.map((url) => `credential.${url}.helper`));
    const overrides = await sandboxOverrides({ entries, hostHome: dir, knownHosts: [], sandboxPath: (file) => file, publicKeyExists: () => Promise.resolve(false), xdgDefaults: [] });
    const generated = path.join(dir, 'generated.gitconfig');
    writeFileSync(generated, renderGlobalConfig({ includes: [host], safeDirectories: [], settings: overrides.settings }).text);
    const fill = (globalConfig: string, url: string) =>
      execa('git', ['credential', 'fill'], {
        cwd: dir,
        input: `url=${url}/repo.git\n\n`,
        env: { HOME: dir, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: globalConfig, GIT_TERMINAL_PROMPT: '0', PATH: process.env.PATH ?? '' },
        reject: false,
      });
    for (const [index, url] of urls.entries()) {
      await fill(host, url);
      expect(existsSync(marker(index)), url).toBe(true);
      rmSync(marker(index));
      await fill(generated, url);
      expect(existsSync(marker(index)), url).toBe(false);
    }
  });
});
