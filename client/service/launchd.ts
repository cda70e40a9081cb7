import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fillTemplate, refuseControlCharacters } from './templates.js';
import type { ServiceManager, ServiceSpec, ServiceStep } from './service.js';

export const LAUNCHD_LABEL = 'dev.sandboxd.daemon';

export function launchdPlistPath(home: string): string {
  return path.join(home, 'Library', 'LaunchAgents', `${LAUNCHD_LABEL}.plist`);
}

/**
 * Character data of a property list (XML 1.0): markup characters as entities. XML cannot carry
 * most control characters even as references, and a parser turns a raw CR into LF, so every
 * control character is refused, as in the systemd units.
 */
export function xml(value: string, what: string): string {
  refuseControlCharacters(value, what);
  return value.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;').replaceAll("'", '&apos;');
}

/** Pure: the LaunchAgent for `spec`, from the `launchd/sandboxd.plist` template. */
export function renderPlist(template: string, spec: ServiceSpec): string {
  const environment = Object.entries(spec.env)
    .map(([name, value]) => `    <key>${xml(name, 'a variable name')}</key>\n    <string>${xml(value, name)}</string>`)
    .join('\n');
  return fillTemplate(template, {
    LABEL: xml(LAUNCHD_LABEL, 'the label'),
    NODE: xml(spec.node, 'the node path'),
    ENTRY: xml(spec.entry, 'the sandboxd entry path'),
    STDIO_LOG: xml(path.join(spec.paths.logDir, 'launchd.log'), 'the log dir (SANDBOXD_LOG_DIR)'),
    ENVIRONMENT: environment,
  });
}

function unxml(text: string): string {
  return text
    .replace(/&#(x[0-9a-fA-F]+|[0-9]+);/g, (_match, code: string) => String.fromCodePoint(code.startsWith('x') ? parseInt(code.slice(1), 16) : Number(code)))
    .replaceAll('&lt;', '<')
    .replaceAll('&gt;', '>')
    .replaceAll('&quot;', '"')
    .replaceAll('&apos;', "'")
    .replaceAll('&amp;', '&');
}

/** The ProgramArguments of a plist `renderPlist` wrote. */
export function parseProgramArguments(plist: string): string[] | null {
  const array = /<key>ProgramArguments<\/key>\s*<array>([\s\S]*?)<\/array>/.exec(plist)?.[1];
  if (array === undefined) return null;
  return [...array.matchAll(/<string>([\s\S]*?)<\/string>/g)].map((match) => unxml(match[1] ?? ''));
}

/** `launchctl print` says `last exit code = 0`, or `= (never exited)`. */
function lastExit(output: string): string | null {
  const code = /^\s*last exit code = (.+)$/m.exec(output)?.[1];
  const state = /^\s*state = (.+)$/m.exec(output)?.[1];
  return code === undefined ? null : `${state ?? 'unknown'}, last exit code ${code.trim()}`;
}

/** launchd in the user's GUI domain (`gui/<uid>`), where a LaunchAgent runs at login. */
export function launchdManager(options: { home: string; uid: number; template: () => string }): ServiceManager {
  const plist = launchdPlistPath(options.home);
  const domain = `gui/${options.uid}`;
  const target = `${domain}/${LAUNCHD_LABEL}`;
  const unload: ServiceStep[] = [
    { kind: 'run', argv: ['launchctl', 'bootout', target], mayFail: true },
    // bootout returns before the job is gone; bootstrapping before then fails with EIO.
    { kind: 'wait-until-fails', argv: ['launchctl', 'print', target], what: `${target} to unload` },
  ];
  return {
    kind: 'launchd',
    files: [plist],
    installSteps: (spec) => [
      ...unload,
      { kind: 'write', path: plist, content: renderPlist(options.template(), spec) },
      { kind: 'run', argv: ['launchctl', 'bootstrap', domain, plist] },
    ],
    uninstallSteps: () => [...unload, { kind: 'remove', path: plist }],
    startArgv: ['launchctl', 'kickstart', target],
    // SIGTERM makes the daemon exit 0, which KeepAlive (SuccessfulExit=false) leaves stopped.
    stopArgv: ['launchctl', 'kill', 'SIGTERM', target],
    restartArgv: ['launchctl', 'kickstart', '-k', target],
    loadedArgv: ['launchctl', 'print', target],
    // The GUI domain exists only while the user is logged in graphically: over ssh alone,
    // `print` and `bootstrap` fail (`125: Domain does not support specified action`, or `5: Input/output error`).
    reachableArgv: ['launchctl', 'print', domain],
    unreachableRemedy:
      'The gui/<uid> launchd domain exists only while you are logged in to the Mac\'s desktop (ssh alone has none). Log in graphically and run `sandboxd install` from a Terminal there, or skip it: clients start the daemon themselves.',
    // launchd is every Mac's init.
    absent: () => Promise.resolve(null),
    program: async () => {
      const content = await fs.readFile(plist, 'utf8').catch(() => null);
      return content === null ? null : parseProgramArguments(content);
    },
    statusArgv: ['launchctl', 'print', target],
    lastExit,
  };
}
