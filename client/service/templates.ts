import { readFileSync } from 'node:fs';
import { SandboxdError } from '../../shared/errors.js';
import { packageFile } from '../../daemon/os/package-files.js';

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

/** C0 controls and DEL: no service file reads them back as the value they were. */
function firstControl(value: string): number | undefined {
  for (let index = 0; index < value.length; index += 1) {
    const code = value.charCodeAt(index);
    if (code < 0x20 || code === 0x7f) return code;
  }
  return undefined;
}

/**
 * Refuses a value with a control character before anything is written: in a systemd unit a
 * newline ends the directive and starts another (`ExecStartPre=` from an environment value), and
 * XML 1.0 cannot carry most of them at all. `what` names where the value came from.
 */
export function refuseControlCharacters(value: string, what: string): string {
  const found = firstControl(value);
  if (found !== undefined) {
    const code = `U+${found.toString(16).toUpperCase().padStart(4, '0')}`;
    throw new SandboxdError('SERVICE_VALUE_UNSUPPORTED', `${what} contains a control character (${code}); it cannot be written into the service file`, {
      remedy: `Remove the control character from ${what} (rename or move the path, or change the variable), then run \`sandboxd install\` again.`,
    });
  }
  return value;
}
