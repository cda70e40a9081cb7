import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SandboxdError } from '../../shared/errors.js';

/**
 * The package's own `launchd/` or `systemd/` template. Walked up to from this file, so it works
 * from `dist/` and from sources under vitest alike.
 */
export function readTemplate(folder: 'launchd' | 'systemd', name: string): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let depth = 0; depth < 5; depth += 1) {
    try {
      return readFileSync(path.join(dir, folder, name), 'utf8');
    } catch {
      dir = path.dirname(dir);
    }
  }
  throw new SandboxdError('SERVICE_FAILED', `cannot find the ${folder}/${name} template of this sandboxd package`, {
    remedy: 'Reinstall sandboxd (`npm install -g sandboxd`); its package ships the launchd/ and systemd/ folders.',
  });
}

/**
 * Fills `{{NAME}}` placeholders; every one must have a value, so a template and its renderer
 * cannot drift apart silently. Values are escaped by the caller for the file's syntax.
 */
export function fillTemplate(template: string, values: Readonly<Record<string, string>>): string {
  return template.replace(/\{\{([A-Z_]+)\}\}/g, (_match, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`template placeholder {{${name}}} has no value`);
    return value;
  });
}
