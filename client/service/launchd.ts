import path from 'node:path';
import { fillTemplate } from './templates.js';
import type { ServiceManager, ServiceSpec, ServiceStep } from './service.js';

export const LAUNCHD_LABEL = 'dev.sandboxd.daemon';

export function launchdPlistPath(home: string): string {
  return path.join(home, 'Library', 'LaunchAgents', `${LAUNCHD_LABEL}.plist`);
}

function xml(value: string): string {
  return value.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;');
}

/** Pure: the LaunchAgent for `spec`, from the `launchd/sandboxd.plist` template. */
export function renderPlist(template: string, spec: ServiceSpec): string {
  const environment = Object.entries(spec.env)
    .map(([name, value]) => `    <key>${xml(name)}</key>\n    <string>${xml(value)}</string>`)
    .join('\n');
  return fillTemplate(template, {
    LABEL: xml(LAUNCHD_LABEL),
    NODE: xml(spec.node),
    ENTRY: xml(spec.entry),
    STDIO_LOG: xml(path.join(spec.paths.logDir, 'launchd.log')),
    ENVIRONMENT: environment,
  });
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
  };
}
