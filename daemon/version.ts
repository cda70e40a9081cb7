import { readFileSync } from 'node:fs';
import { PACKAGE_ROOT, packageFile } from './package-files.js';

function readVersion(): string {
  if (PACKAGE_ROOT === null) return '0.0.0-unknown';
  const pkg = JSON.parse(readFileSync(packageFile('package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

export const VERSION = readVersion();
