import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_SPECS } from '../../shared/errors.js';

const ROOT = path.join(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
const readme = read('README.md');
const errors = read('docs/errors.md');
const commands = read('docs/commands.md');
const configuration = read('docs/configuration.md');

/** Every `.ts` file under the folders the package is built from. */
function sources(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => path.join(entry.parentPath, entry.name));
}

/** The `SANDBOXD_*` variables the code reads: named in a string, or read as `env.NAME`. */
function variablesRead(): string[] {
  const names = new Set<string>();
  for (const file of ['client', 'daemon', 'shared'].flatMap(sources)) {
    for (const match of readFileSync(file, 'utf8').matchAll(/(?:['"`]|env\.)(SANDBOXD_[A-Z_]*[A-Z])\b/g)) names.add(match[1] ?? '');
  }
  return [...names].sort();
}

describe('the docs stay true', () => {
  it.each(Object.entries(ERROR_SPECS))('docs/errors.md documents %s with its status and remedy', (code, spec) => {
    const row = errors.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
    expect(row).toBeDefined();
    expect(row).toContain(`| ${spec.status} |`);
    expect(row).toContain(spec.remedy.replaceAll('|', '\\|'));
  });

  it('keeps the error codes in one table, so a new row merges as one line', () => {
    const tables = errors.split('\n').filter((line) => line.startsWith('| code |'));
    expect(tables).toHaveLength(1);
  });

  it.each(['daemon', 'start', 'stop', 'restart', 'status', 'sessions ls', 'sessions rm', 'tunnels ls', 'tunnels restart', 'tunnels rm', 'plan', 'run', 'install', 'uninstall', 'doctor', 'logs', 'version', 'completion'])('docs/commands.md documents `sandboxd %s`', (command) => {
    expect(commands).toContain(`\`sandboxd ${command}`);
  });

  it('docs/configuration.md documents every SANDBOXD_ variable the code reads', () => {
    const read = variablesRead();
    expect(read).toContain('SANDBOXD_STATE_DIR');
    expect(read.filter((name) => !configuration.includes(`\`${name}\``))).toEqual([]);
  });

  it('the README stays short and puts the main job on its first screen', () => {
    const lines = readme.split('\n');
    expect(lines.length).toBeLessThanOrEqual(160);
    expect(lines.slice(0, 60).join('\n')).toContain('sandboxd run');
    // The Set-up section starts with the install command, then the whole suite's.
    const setUp = readme.slice(readme.indexOf('## Set-up'));
    const blocks = [...setUp.matchAll(/```sh\n(.*)\n```/g)].map((match) => match[1]);
    expect(blocks[0]).toContain('npm install -g');
    expect(blocks[1]).toBe('npm test');
  });

  it('every link in the README and docs/ leads to a file that exists', () => {
    const files = ['README.md', ...readdirSync(path.join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' }).filter((name) => name.endsWith('.md')).map((name) => path.join('docs', name))];
    const broken: string[] = [];
    for (const file of files) {
      for (const match of read(file).matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        const target = match[1] ?? '';
        if (/^[a-z]+:/.test(target)) continue;
        if (!existsSync(path.join(ROOT, path.dirname(file), target))) broken.push(`${file}: ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
