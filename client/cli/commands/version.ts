import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { PROTOCOL_VERSION } from '../../../shared/protocol.js';
import { VERSION } from '../../../daemon/os/package-files.js';
import { readAnyStatus } from '../../any-status.js';
import { clientPaths } from '../../connection.js';
import { printJson, runAction } from '../output.js';

/** The running daemon's version, or null; a daemon of another protocol still says which it is. */
async function daemonVersion(): Promise<{ version: string | null; protocol: number; pid: number | null } | null> {
  try {
    const status = await readAnyStatus(clientPaths().socketPath);
    return { version: status.version ?? null, protocol: status.protocol, pid: status.pid ?? null };
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING') return null;
    throw error;
  }
}

export function registerVersionCommand(program: Command): void {
  program
    .command('version')
    .description('print the client\'s and the running daemon\'s versions and protocols (never starts a daemon)')
    .option('--json', 'print JSON')
    .action(async (flags: { json?: boolean }) => {
      await runAction(flags.json === true, async () => {
        const client = { version: VERSION, protocol: PROTOCOL_VERSION };
        const daemon = await daemonVersion();
        if (flags.json === true) {
          printJson({ client, daemon });
          return 0;
        }
        const daemonLine = daemon === null ? 'not running' : `${daemon.version ?? 'unknown version'} (protocol ${daemon.protocol}, pid ${daemon.pid ?? 'unknown'})`;
        process.stdout.write(`client: ${client.version} (protocol ${client.protocol})\ndaemon: ${daemonLine}\n`);
        return 0;
      });
    });
}
