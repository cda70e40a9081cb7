import { readFileSync } from 'node:fs';
import { SandboxdError } from '../../shared/errors.js';
import { packageFile } from '../../daemon/package-files.js';

/** The package's own `launchd/` or `systemd/` template. */
export function readTemplate(folder: 'launchd' | 'systemd', name: string): string {
  try {
    return readFileSync(packageFile(folder, name), 'utf8');
  } catch (cause) {
    throw new SandboxdError('SERVICE_FAILED', `cannot find the ${folder}/${name} template of this sandboxd package`, {
      remedy: 'Reinstall sandboxd (`npm install -g sandboxd`); its package ships the launchd/ and systemd/ folders.',
      cause,
    });
  }
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
