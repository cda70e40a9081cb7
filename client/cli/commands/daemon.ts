import { Option, type Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { runDaemon } from '../../../daemon/main.js';
import { runAction } from '../output.js';

/** `name` is how the value was given: the flag, or the environment variable. */
function seconds(value: string | undefined, name: string): number | undefined {
  if (value === undefined || value === '') return undefined;
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed < 0) {
    throw new SandboxdError('USAGE', `${name} must be a number of seconds, got "${value}"`, { remedy: `Give ${name} a number of seconds, e.g. 60.` });
  }
  return Math.round(parsed * 1000);
}

export function registerDaemonCommand(program: Command): void {
  program
    .command('daemon')
    .description('run the daemon in the foreground (what auto-start, launchd and systemd run)')
    .addOption(new Option('--log <target>', 'where logs go: file (the log dir) or stdout').choices(['file', 'stdout']).default('file'))
    .option('--lease-ttl <seconds>', 'end a session whose heartbeats stop for this long', '30')
    .option('--tunnel-idle <seconds>', 'keep an unused tunnel or relay this long (env SANDBOXD_TUNNEL_IDLE)')
    .addOption(
      new Option('--service-manager <manager>', 'started by this service manager (the installed units say so): another daemon already serving is not an error, exit 0').choices([
        'launchd',
        'systemd',
      ]),
    )
    .action(async (options: { log: 'file' | 'stdout'; leaseTtl: string; tunnelIdle?: string; serviceManager?: 'launchd' | 'systemd' }) => {
      await runAction(false, async () => {
        const leaseTtlMs = seconds(options.leaseTtl, '--lease-ttl');
        const bridgeIdleMs =
          options.tunnelIdle === undefined ? seconds(process.env.SANDBOXD_TUNNEL_IDLE, 'SANDBOXD_TUNNEL_IDLE') : seconds(options.tunnelIdle, '--tunnel-idle');
        return runDaemon({
          env: process.env,
          log: options.log,
          // Laid over the defaults: a setting not given must be absent, not undefined.
          settings: {
            ...(leaseTtlMs === undefined ? {} : { leaseTtlMs }),
            ...(bridgeIdleMs === undefined ? {} : { bridgeIdleMs }),
          },
          serviceManager: options.serviceManager,
          onListening: (paths) => {
            process.stderr.write(`sandboxd: listening on ${paths.socketPath} (pid ${process.pid})\n`);
          },
          onAlreadyRunning: (message) => {
            process.stderr.write(`sandboxd: ${message}; leaving it to serve\n`);
          },
        });
      });
    });
}
