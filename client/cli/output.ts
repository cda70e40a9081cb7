import { SandboxdError } from '../../shared/errors.js';
import { forPeople } from './friendly.js';

/** `sandboxd status` and friends exit 3 when no daemon runs, like `systemctl status`. */
export const EXIT_NOT_RUNNING = 3;
/** A command line sandboxd cannot parse, as getopt-style tools do. */
export const EXIT_USAGE = 2;

/** The command being run (`plan`, `tunnels ls`), for hints like `see 'sandboxd plan --help'`. */
let commandName = '';

export function setCommandName(name: string): void {
  commandName = name;
}

export function toError(error: unknown): SandboxdError {
  if (error instanceof SandboxdError) return error;
  return new SandboxdError('INTERNAL', error instanceof Error ? error.message : String(error));
}

/** The one way the CLI reports a failure (STYLE 7); returns the exit code to use. */
export function reportError(error: unknown, json: boolean): number {
  const mapped = forPeople(toError(error), commandName);
  if (json) process.stdout.write(`${JSON.stringify({ error: mapped.toJSON() }, null, 2)}\n`);
  else process.stderr.write(`sandboxd: ${mapped.message}\n  ${mapped.remedy}\n`);
  if (mapped.code === 'USAGE') return EXIT_USAGE;
  return mapped.code === 'DAEMON_NOT_RUNNING' ? EXIT_NOT_RUNNING : 1;
}

/** One line `sandboxd: …` and where to read more, or the JSON error shape; exit 2. */
export function reportUsage(message: string, command: string, json: boolean): number {
  const hint = `see 'sandboxd ${command === '' ? '' : `${command} `}--help'`;
  if (json) printJson({ error: new SandboxdError('USAGE', message, { remedy: `See \`sandboxd ${command === '' ? '' : `${command} `}--help\`.` }).toJSON() });
  else process.stderr.write(`sandboxd: ${message}\n  ${hint}\n`);
  return EXIT_USAGE;
}

/**
 * `sandboxd … | head`: once the reader is gone, output is dropped instead of crashing with a stack
 * trace, and the command runs on to its cleanup (a `plan` still releases its session).
 */
export function guardClosedPipes(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
      stream.write = () => true;
    });
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export interface Column<T> {
  header: string;
  value(row: T): string;
}

export function printTable<T>(columns: readonly Column<T>[], rows: readonly T[], empty: string): void {
  if (rows.length === 0) {
    process.stdout.write(`${empty}\n`);
    return;
  }
  const cells = rows.map((row) => columns.map((column) => column.value(row)));
  const widths = columns.map((column, index) => Math.max(column.header.length, ...cells.map((line) => (line[index] ?? '').length)));
  const format = (line: readonly string[]): string =>
    line.map((cell, index) => (index === line.length - 1 ? cell : cell.padEnd(widths[index] ?? 0))).join('  ').trimEnd();
  process.stdout.write(`${[format(columns.map((column) => column.header)), ...cells.map(format)].join('\n')}\n`);
}

export function formatAge(fromIso: string, now = Date.now()): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(fromIso)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86_400)}d`;
}

/** Runs a command body and turns a thrown error into the printed report and exit code. */
export async function runAction(json: boolean, body: () => Promise<number | undefined>): Promise<void> {
  try {
    process.exitCode = (await body()) ?? 0;
  } catch (error) {
    process.exitCode = reportError(error, json);
  }
}
