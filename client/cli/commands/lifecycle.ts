import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { createProcessProbe, readPidRecord } from '../../../daemon/os/process-identity.js';
import { currentPlatform } from '../../../shared/paths.js';
import { readAnyStatus } from '../../any-status.js';
import { requestShutdown } from '../../daemon-calls.js';
import { ensureDaemon } from '../../autostart.js';
import { clientPaths } from '../../connection.js';
import { managerInputs, managerRunner } from '../../service/control.js';
import { installedService } from '../../service/manager.js';
import { printJson, runAction } from '../output.js';
import { withProgress } from '../progress.js';
import { printRunning, statusOrNull } from './status.js';

const STOP_TIMEOUT_MS = 6_000;
/** A service manager's stop is synchronous (systemd) or quick (launchd); past this the daemon is not its. */
const MANAGED_STOP_MS = 2_000;

/** Polls until `pid` has exited (a zombie counts) and no pid record names it any more. */
export async function stoppedWithin(pid: number, timeoutMs: number): Promise<boolean> {
  const { pidPath } = clientPaths();
  const probe = createProcessProbe(currentPlatform());
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await probe.isSame(pid, null)) && (await readPidRecord(pidPath))?.pid !== pid) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/**
 * What the sessions of a daemon that stops lose, said before it happens. The next daemon serves
 * their sockets again at the same paths (DESIGN §5); only a client of this release can renew its
 * lease with it, so one of another release keeps them for one lease.
 */
export function sessionsWarning(sessions: number, sameRelease = true): string | null {
  if (sessions === 0) return null;
  const open = `sandboxd: stopping with ${sessions} open session${sessions === 1 ? '' : 's'}`;
  if (!sameRelease) {
    return `${open} of another release: their containers' SSH agent and extra sockets stop answering; the next daemon serves them again for one lease, which their clients cannot renew (containers are not removed)\n`;
  }
  return `${open}: their containers' SSH agent and extra sockets stop answering until a daemon runs again, which serves the same sockets; live clients renew their lease (containers are not removed)\n`;
}

/** The daemon to stop: of this release, or of another one (`restart` is how an upgrade ends). */
async function daemonToStop(): Promise<{ pid: number; sessions: number; sameRelease: boolean } | null> {
  try {
    const status = await statusOrNull();
    return status === null ? null : { pid: status.pid, sessions: status.counts.sessions, sameRelease: true };
  } catch (error) {
    if (!(error instanceof SandboxdError && error.code === 'PROTOCOL_MISMATCH')) throw error;
    const any = await readAnyStatus(clientPaths().socketPath);
    if (any.pid === undefined) throw error;
    return { pid: any.pid, sessions: any.counts?.sessions ?? 0, sameRelease: false };
  }
}

/**
 * Through the service manager when `sandboxd install` put the daemon under one (so launchd or
 * systemd does not restart it behind our back), else over the socket.
 */
export async function stopDaemon(json: boolean): Promise<'stopped' | 'not-running'> {
  const status = await daemonToStop();
  if (status === null) return 'not-running';
  const warning = sessionsWarning(status.sessions, status.sameRelease);
  if (warning !== null && !json) process.stderr.write(warning);
  const service = await installedService(managerInputs(process.env, currentPlatform()));
  if (service !== null) {
    const [file = '', ...args] = service.stopArgv;
    await (await managerRunner(process.env, currentPlatform()))(file, args);
    if (await stoppedWithin(status.pid, MANAGED_STOP_MS)) return 'stopped';
  }
  try {
    await requestShutdown();
  } catch (error) {
    if (!(error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING')) throw error;
  }
  if (await stoppedWithin(status.pid, STOP_TIMEOUT_MS)) return 'stopped';
  throw new SandboxdError('DAEMON_TIMEOUT', `the daemon (pid ${status.pid}) did not stop within ${STOP_TIMEOUT_MS} ms`, {
    remedy: `Kill it: \`kill ${status.pid}\`.`,
  });
}

async function startDaemon(json: boolean): Promise<number> {
  const status = await withProgress('starting the daemon', ensureDaemon({ paths: clientPaths(), env: process.env, autoStart: true }));
  printRunning(status, json);
  return 0;
}

export function registerLifecycleCommands(program: Command): void {
  program
    .command('start')
    .description('start the daemon in the background, through launchd/systemd once installed (no-op when it runs)')
    .option('--json', 'print JSON (the shape of `status --json`)')
    .action(async (options: { json?: boolean }) => {
      await runAction(options.json === true, () => startDaemon(options.json === true));
    });

  program
    .command('stop')
    .description('stop the daemon gracefully: end sessions, tunnels and relays')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      const json = options.json === true;
      await runAction(json, async () => {
        const result = await stopDaemon(json);
        if (json) printJson({ stopped: result === 'stopped', running: false });
        else process.stdout.write(result === 'stopped' ? 'sandboxd stopped\n' : 'sandboxd is not running\n');
        return 0;
      });
    });

  program
    .command('restart')
    .description('stop the daemon, then start it again')
    .option('--json', 'print JSON (the shape of `status --json`)')
    .action(async (options: { json?: boolean }) => {
      const json = options.json === true;
      await runAction(json, async () => {
        await stopDaemon(json);
        return startDaemon(json);
      });
    });
}
