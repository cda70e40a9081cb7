import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { readPidRecord } from '../../../daemon/instance-lock.js';
import { createProcessProbe } from '../../../daemon/process-identity.js';
import { currentPlatform } from '../../../shared/paths.js';
import { getStatus, requestShutdown } from '../../admin.js';
import { ensureDaemon } from '../../autostart.js';
import { clientPaths } from '../../connection.js';
import { engineLines } from '../engines.js';
import { EXIT_NOT_RUNNING, formatAge, printJson, runAction } from '../output.js';

const STOP_TIMEOUT_MS = 6_000;

async function stopDaemon(): Promise<'stopped' | 'not-running'> {
  const paths = clientPaths();
  let pid: number;
  try {
    pid = (await getStatus()).pid;
    await requestShutdown();
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING') return 'not-running';
    throw error;
  }
  // A daemon that exited but was not reaped yet (a zombie) has stopped too.
  const probe = createProcessProbe(currentPlatform());
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (!(await probe.isSame(pid, null)) && (await readPidRecord(paths.pidPath)) === null) return 'stopped';
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new SandboxdError('DAEMON_TIMEOUT', `the daemon (pid ${pid}) did not stop within ${STOP_TIMEOUT_MS} ms`, {
    remedy: `Kill it: \`kill ${pid}\`.`,
  });
}

async function startDaemon(json: boolean): Promise<number> {
  const status = await ensureDaemon({ paths: clientPaths(), env: process.env, autoStart: true });
  if (json) printJson({ running: true, pid: status.pid, socketPath: status.socketPath });
  else process.stdout.write(`sandboxd is running (pid ${status.pid}, ${status.socketPath})\n`);
  return 0;
}

export function registerLifecycleCommands(program: Command): void {
  program
    .command('start')
    .description('start the daemon in the background (no-op when it runs)')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      await runAction(options.json === true, () => startDaemon(options.json === true));
    });

  program
    .command('stop')
    .description('stop the daemon gracefully: end sessions, tunnels and relays')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      await runAction(options.json === true, async () => {
        const result = await stopDaemon();
        if (options.json === true) printJson({ stopped: result === 'stopped', running: false });
        else process.stdout.write(result === 'stopped' ? 'sandboxd stopped\n' : 'sandboxd is not running\n');
        return 0;
      });
    });

  program
    .command('restart')
    .description('stop the daemon, then start it again')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      await runAction(options.json === true, async () => {
        await stopDaemon();
        return startDaemon(options.json === true);
      });
    });

  program
    .command('status')
    .description('show whether the daemon runs (exit 3 when not); never starts one')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      const json = options.json === true;
      await runAction(json, async () => {
        let status;
        try {
          status = await getStatus();
        } catch (error) {
          if (!(error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING')) throw error;
          const { socketPath } = clientPaths();
          if (json) printJson({ running: false, socketPath });
          else process.stdout.write(`sandboxd is not running (socket ${socketPath})\n  Start it with \`sandboxd start\`.\n`);
          return EXIT_NOT_RUNNING;
        }
        if (json) {
          printJson({ running: true, ...status });
          return 0;
        }
        process.stdout.write(
          [
            `sandboxd ${status.version} is running`,
            `  pid:       ${status.pid}`,
            `  socket:    ${status.socketPath}`,
            `  uptime:    ${formatAge(status.startedAt)}`,
            `  sessions:  ${status.counts.sessions}`,
            `  tunnels:   ${status.counts.tunnels}`,
            `  protocol:  ${status.protocol}`,
            `  log:       ${status.logPath ?? 'stdout'}`,
            ...engineLines(status.engines),
          ].join('\n') + '\n',
        );
        return 0;
      });
    });
}
