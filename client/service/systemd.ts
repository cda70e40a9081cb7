import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fillTemplate, refuseControlCharacters } from './templates.js';
import type { ServiceManager, ServiceSpec } from './service.js';

export const SYSTEMD_SERVICE = 'sandboxd.service';
export const SYSTEMD_SOCKET = 'sandboxd.socket';

export function systemdUnitDir(env: NodeJS.ProcessEnv, home: string): string {
  const config = env.XDG_CONFIG_HOME === undefined || env.XDG_CONFIG_HOME === '' ? path.join(home, '.config') : env.XDG_CONFIG_HOME;
  return path.join(config, 'systemd', 'user');
}

/**
 * One ExecStart word: `%` is a specifier and `$` a variable there, and a word with spaces needs
 * double quotes (systemd.service(5), "Command lines"). A control character is refused: a newline
 * would end the directive and start another.
 */
export function execWord(value: string, what = 'a path of the service command'): string {
  refuseControlCharacters(value, what);
  const escaped = value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('%', '%%').replaceAll('$', '$$$$');
  return /[\s"'\\]/.test(value) ? `"${escaped}"` : escaped;
}

/** One `Environment=` assignment: specifiers expand there, variables do not (systemd.exec(5)). */
export function environmentLine(name: string, value: string): string {
  refuseControlCharacters(value, name);
  const assignment = `${name}=${value}`.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('%', '%%');
  return `Environment="${assignment}"`;
}

/**
 * `ListenStream=` takes the rest of the line with specifiers expanded (an absolute path ending in
 * the socket's name has no blank at either end for systemd to trim).
 */
function listenStream(socketPath: string): string {
  refuseControlCharacters(socketPath, 'the socket path (SANDBOXD_RUNTIME_DIR or SANDBOXD_STATE_DIR)');
  return socketPath.replaceAll('%', '%%');
}

/** Pure: both units for `spec`, from the `systemd/` templates. */
export function renderUnits(templates: { service: string; socket: string }, spec: ServiceSpec): { service: string; socket: string } {
  const environment = Object.entries(spec.env)
    .map(([name, value]) => environmentLine(name, value))
    .join('\n');
  return {
    service: fillTemplate(templates.service, {
      EXEC_START: [execWord(spec.node, 'the node path'), execWord(spec.entry, 'the sandboxd entry path'), 'daemon', '--service-manager', 'systemd'].join(' '),
      ENVIRONMENT: environment,
    }),
    socket: fillTemplate(templates.socket, { SOCKET: listenStream(spec.paths.socketPath) }),
  };
}

/** The words of an ExecStart line as `renderUnits` writes them (double quotes, backslash escapes, `%%`, `$$`). */
export function parseExecStart(unit: string): string[] | null {
  const line = /^ExecStart=(.*)$/m.exec(unit)?.[1];
  if (line === undefined) return null;
  const words: string[] = [];
  for (const match of line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) {
    const raw = match[1] ?? match[2] ?? '';
    words.push(raw.replace(/\\(.)/g, '$1').replaceAll('%%', '%').replaceAll('$$', '$'));
  }
  return words;
}

/** `systemctl show` lines the doctor reports: how the service's last run ended. */
function lastExit(output: string): string | null {
  const values = new Map(output.split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
  const status = values.get('ExecMainStatus');
  const result = values.get('Result');
  if (status === undefined || result === undefined) return null;
  return `${values.get('ActiveState') ?? 'unknown'}, last exit status ${status} (${result})`;
}

/** Where systemd, as PID 1, says it runs (sd_booted(3)). */
export const SYSTEMD_BOOTED_DIR = '/run/systemd/system';

export interface SystemdOptions {
  unitDir: string;
  templates: () => { service: string; socket: string };
  /** The user's login name, for the remedy's `loginctl enable-linger`. */
  user: string;
  /** Exists when systemd is the init system (default SYSTEMD_BOOTED_DIR). */
  bootedDir?: string;
}

/** PID 1's name, for saying what runs instead of systemd. */
async function initName(): Promise<string | null> {
  const comm = await fs.readFile('/proc/1/comm', 'utf8').catch(() => null);
  return comm === null || comm.trim() === '' ? null : comm.trim();
}

/** systemd's user instance: the socket is enabled, the service starts on the first connection. */
export function systemdManager(options: SystemdOptions): ServiceManager {
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
    // Talks to the user's manager over its bus: fails (`Failed to connect to bus`) where there is none.
    reachableArgv: systemctl('show-environment'),
    unreachableRemedy: `No user systemd answers in this shell (\`su -\`, \`sudo -u\` and cron shells have no user bus). Enable lingering (as root: \`loginctl enable-linger ${options.user}\`) and run \`sandboxd install\` again, or run it from a login of the user (ssh, a desktop session); or skip it: clients start the daemon themselves.`,
    absent: async () => {
      const booted = await fs.stat(options.bootedDir ?? SYSTEMD_BOOTED_DIR).then((stat) => stat.isDirectory(), () => false);
      if (booted) return null;
      const init = await initName();
      return `systemd is not the init system here (no ${options.bootedDir ?? SYSTEMD_BOOTED_DIR}${init === null ? '' : `; PID 1 is ${init}`}), so no user systemd can start sandboxd at login`;
    },
    program: async () => {
      const unit = await fs.readFile(servicePath, 'utf8').catch(() => null);
      return unit === null ? null : parseExecStart(unit);
    },
    statusArgv: systemctl('show', SYSTEMD_SERVICE, '--property=ActiveState,ExecMainStatus,Result'),
    lastExit,
  };
}
