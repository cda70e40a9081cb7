import { SandboxdError } from '../../shared/errors.js';
import { forPeople } from './friendly.js';

/** `sandboxd status` and friends exit 3 when no daemon runs, like `systemctl status`. */
export const EXIT_NOT_RUNNING = 3;
/** A command line sandboxd cannot parse, as getopt-style tools do. */
export const EXIT_USAGE = 2;
/** No engine to run, as a shell says of a command it cannot find. */
export const EXIT_ENGINE_NOT_FOUND = 127;

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
  if (mapped.code === 'ENGINE_NOT_FOUND') return EXIT_ENGINE_NOT_FOUND;
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
 * trace, and the command runs on to its cleanup (a `plan` still releases its session). Node makes
 * each stream on its first use, which costs a start that never writes (a quiet `run`, whose engine
 * writes to the terminal itself) a few milliseconds: the guard goes onto each when it is made.
 */
export function guardClosedPipes(): void {
  for (const name of ['stdout', 'stderr'] as const) {
    const made = Object.getOwnPropertyDescriptor(process, name);
    if (made?.get === undefined || made.configurable !== true) {
      dropAfterEpipe(process[name]);
      continue;
    }
    const make = made.get.bind(process) as () => NodeJS.WriteStream;
    Object.defineProperty(process, name, {
      configurable: true,
      enumerable: made.enumerable ?? true,
      get() {
        const stream = make();
        Object.defineProperty(process, name, made);
        dropAfterEpipe(stream);
        return stream;
      },
    });
  }
}

function dropAfterEpipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    stream.write = () => true;
  });
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export interface Column<T> {
  header: string;
  value(row: T): string;
  /** Never cut: an id a person pastes into the next command. */
  whole?: boolean;
  /** Cut at the start, keeping the end: a path's file name says more than its first directories. */
  keepEnd?: boolean;
  /** With keepEnd: the path's last component is never cut (the directory that tells tunnels apart). */
  keepLast?: boolean;
  /** Shown only with `--no-trunc` (and always in `--json`): what no default width has room for. */
  wideOnly?: boolean;
}

/** Tables fit a terminal of this many columns unless `--no-trunc` asks for them whole. */
export const TABLE_WIDTH = 100;
const GAP = 2;
/** A column is never cut below its header or this many characters. */
const MIN_COLUMN = 6;

/**
 * Column widths that fit `limit` with the gaps between them: the widest column gives up one
 * character at a time, so short columns (ids, states, counts) stay whole while paths and errors
 * are cut. Columns already at their floor keep it, so a table of many headers may stay wider.
 */
export function fitWidths(natural: readonly number[], floors: readonly number[], limit: number): number[] {
  const widths = [...natural];
  const total = (): number => widths.reduce((sum, width) => sum + width, 0) + GAP * Math.max(0, widths.length - 1);
  while (total() > limit) {
    let widest = -1;
    widths.forEach((width, index) => {
      if (width > (floors[index] ?? 0) && (widest < 0 || width > (widths[widest] ?? 0))) widest = index;
    });
    if (widest < 0) break;
    widths[widest] = (widths[widest] ?? 0) - 1;
  }
  return widths;
}

function cut(cell: string, width: number, keepEnd: boolean): string {
  if (cell.length <= width) return cell;
  return keepEnd ? `…${cell.slice(cell.length - width + 1)}` : `${cell.slice(0, Math.max(0, width - 1))}…`;
}

export function printTable<T>(allColumns: readonly Column<T>[], rows: readonly T[], empty: string, limit = TABLE_WIDTH): void {
  const columns = limit === Infinity ? allColumns : allColumns.filter((column) => column.wideOnly !== true);
  if (rows.length === 0) {
    process.stdout.write(`${empty}\n`);
    return;
  }
  const cells = rows.map((row) => columns.map((column) => column.value(row)));
  const natural = columns.map((column, index) => Math.max(column.header.length, ...cells.map((line) => (line[index] ?? '').length)));
  const floors = columns.map((column, index) => {
    if (column.whole === true) return natural[index] ?? 0;
    const tail = column.keepLast === true ? Math.max(0, ...cells.map((line) => (line[index] ?? '').split('/').at(-1)?.length ?? 0).map((length) => length + 1)) : 0;
    return Math.max(column.header.length, MIN_COLUMN, tail);
  });
  const widths = fitWidths(natural, floors, limit);
  const format = (line: readonly string[]): string =>
    line.map((cell, index) => {
      const width = widths[index] ?? 0;
      const fitted = cut(cell, width, columns[index]?.keepEnd === true);
      return index === line.length - 1 ? fitted : fitted.padEnd(width);
    }).join(' '.repeat(GAP)).trimEnd();
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
