import path from 'node:path';
import { fillTemplate } from './templates.js';
import type { ServiceManager, ServiceSpec } from './service.js';

export const SYSTEMD_SERVICE = 'sandboxd.service';
export const SYSTEMD_SOCKET = 'sandboxd.socket';

export function systemdUnitDir(env: NodeJS.ProcessEnv, home: string): string {
  const config = env.XDG_CONFIG_HOME === undefined || env.XDG_CONFIG_HOME === '' ? path.join(home, '.config') : env.XDG_CONFIG_HOME;
  return path.join(config, 'systemd', 'user');
}

/**
 * One ExecStart word: `%` is a specifier and `$` a variable there, and a word with spaces needs
 * double quotes (systemd.service(5), "Command lines").
 */
export function execWord(value: string): string {
  const escaped = value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('%', '%%').replaceAll('$', '$$$$');
  return /[\s"'\\]/.test(value) ? `"${escaped}"` : escaped;
}

/** One `Environment=` assignment: specifiers expand there, variables do not (systemd.exec(5)). */
export function environmentLine(name: string, value: string): string {
  const assignment = `${name}=${value}`.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('%', '%%');
  return `Environment="${assignment}"`;
}

/** Pure: both units for `spec`, from the `systemd/` templates. */
export function renderUnits(templates: { service: string; socket: string }, spec: ServiceSpec): { service: string; socket: string } {
  const environment = Object.entries(spec.env)
    .map(([name, value]) => environmentLine(name, value))
    .join('\n');
  return {
    service: fillTemplate(templates.service, {
      EXEC_START: [spec.node, spec.entry, 'daemon'].map(execWord).join(' '),
      ENVIRONMENT: environment,
    }),
    socket: fillTemplate(templates.socket, { SOCKET: spec.paths.socketPath.replaceAll('%', '%%') }),
  };
}

/** systemd's user instance: the socket is enabled, the service starts on the first connection. */
export function systemdManager(options: { unitDir: string; templates: () => { service: string; socket: string } }): ServiceManager {
  const servicePath = path.join(options.unitDir, SYSTEMD_SERVICE);
  const socketPath = path.join(options.unitDir, SYSTEMD_SOCKET);
  const systemctl = (...args: string[]): string[] => ['systemctl', '--user', ...args];
  return {
    kind: 'systemd',
    files: [servicePath, socketPath],
    installSteps: (spec) => {
      const units = renderUnits(options.templates(), spec);
      return [
        { kind: 'write', path: servicePath, content: units.service },
        { kind: 'write', path: socketPath, content: units.socket },
        { kind: 'run', argv: systemctl('daemon-reload') },
        { kind: 'run', argv: systemctl('enable', '--now', SYSTEMD_SOCKET) },
      ];
    },
    uninstallSteps: () => [
      { kind: 'run', argv: systemctl('disable', '--now', SYSTEMD_SOCKET), mayFail: true },
      { kind: 'run', argv: systemctl('stop', SYSTEMD_SERVICE), mayFail: true },
      { kind: 'remove', path: servicePath },
      { kind: 'remove', path: socketPath },
      { kind: 'run', argv: systemctl('daemon-reload'), mayFail: true },
    ],
    startArgv: systemctl('start', SYSTEMD_SOCKET, SYSTEMD_SERVICE),
    stopArgv: systemctl('stop', SYSTEMD_SERVICE),
    restartArgv: systemctl('restart', SYSTEMD_SERVICE),
    loadedArgv: systemctl('is-enabled', '--quiet', SYSTEMD_SOCKET),
  };
}
