import { promises as fs } from 'node:fs';
import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { clientPaths } from '../../connection.js';
import { formatRecord, isSince, parseDuration, parseLine } from '../../logs/format.js';
import { runAction } from '../output.js';

const FOLLOW_POLL_MS = 250;

interface Flags {
  follow?: boolean;
  since?: string;
  json?: boolean;
}

async function readOrNull(file: string): Promise<string | null> {
  try {
    return await fs.readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

function printer(flags: Flags, sinceMs: number | null): (line: string) => void {
  const now = Date.now();
  return (line) => {
    const record = parseLine(line);
    if (record === null || !isSince(record, sinceMs, now)) return;
    process.stdout.write(`${flags.json === true ? JSON.stringify(record) : formatRecord(record)}\n`);
  };
}

/** Prints what is appended to `file` from `offset` on, until interrupted; a rotated file is read afresh. */
async function follow(file: string, offset: number, print: (line: string) => void): Promise<never> {
  let position = offset;
  let partial = '';
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, FOLLOW_POLL_MS));
    const size = (await fs.stat(file).catch(() => null))?.size ?? 0;
    if (size < position) position = 0;
    if (size === position) continue;
    const handle = await fs.open(file, 'r');
    try {
      const buffer = Buffer.alloc(size - position);
      await handle.read(buffer, 0, buffer.length, position);
      position = size;
      const lines = (partial + buffer.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      lines.forEach(print);
    } finally {
      await handle.close();
    }
  }
}

export function registerLogsCommand(program: Command): void {
  program
    .command('logs')
    .description('print the daemon log, readable for people (time, level, module, session or tunnel id, message)')
    .option('-f, --follow', 'keep printing new lines')
    .option('--since <duration>', 'only lines newer than this: 90s, 10m, 2h, 1d')
    .option('--json', 'print the JSON lines as they are')
    .action(async (flags: Flags) => {
      await runAction(flags.json === true, async () => {
        const sinceMs = flags.since === undefined ? null : parseDuration(flags.since, '--since');
        const { logPath } = clientPaths();
        const current = await readOrNull(logPath);
        if (current === null && flags.follow !== true) {
          throw new SandboxdError('LOG_NOT_FOUND', `there is no daemon log at ${logPath}`);
        }
        // The previous file holds what came before the last rotation: read it when asked to reach back.
        const previous = sinceMs === null ? null : await readOrNull(`${logPath}.1`);
        const print = printer(flags, sinceMs);
        for (const text of [previous, current]) text?.split('\n').forEach(print);
        if (flags.follow === true) await follow(logPath, Buffer.byteLength(current ?? ''), print);
        return 0;
      });
    });
}
