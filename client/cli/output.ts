import { SandboxdError } from '../../shared/errors.js';

/** `sandboxd status` and friends exit 3 when no daemon runs, like `systemctl status`. */
export const EXIT_NOT_RUNNING = 3;

export function toError(error: unknown): SandboxdError {
  if (error instanceof SandboxdError) return error;
  return new SandboxdError('INTERNAL', error instanceof Error ? error.message : String(error));
}

/** The one way the CLI reports a failure (STYLE 7); returns the exit code to use. */
export function reportError(error: unknown, json: boolean): number {
  const mapped = toError(error);
  if (json) process.stdout.write(`${JSON.stringify({ error: mapped.toJSON() }, null, 2)}\n`);
  else process.stderr.write(`sandboxd: ${mapped.message}\n  ${mapped.remedy}\n`);
  return mapped.code === 'DAEMON_NOT_RUNNING' ? EXIT_NOT_RUNNING : 1;
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
