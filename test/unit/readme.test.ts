import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_SPECS } from '../../shared/errors.js';

const readme = readFileSync(path.join(import.meta.dirname, '../../README.md'), 'utf8');

describe('README stays true', () => {
  it.each(Object.entries(ERROR_SPECS))('documents %s with its status and remedy', (code, spec) => {
    const row = readme.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
    expect(row).toBeDefined();
    expect(row).toContain(`| ${spec.status} |`);
    expect(row).toContain(spec.remedy.replaceAll('|', '\\|'));
  });

  it.each(['daemon', 'start', 'stop', 'restart', 'status', 'sessions ls', 'sessions rm', 'tunnels ls', 'tunnels restart', 'tunnels rm', 'plan', 'run', 'install', 'uninstall', 'doctor', 'logs', 'version'])('documents `sandboxd %s`', (command) => {
    expect(readme).toContain(`\`sandboxd ${command}`);
  });
});
