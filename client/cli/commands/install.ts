import { promises as fs, realpathSync } from 'node:fs';
import os from 'node:os';
import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { currentPlatform, type SandboxdPaths } from '../../../shared/paths.js';
import { CLI_ENTRY } from '../../../daemon/os/package-files.js';
import { ensureSecureDir } from '../../../daemon/os/secure-dir.js';
import { socketAnswers } from '../../../daemon/os/socket-probe.js';
import { clientPaths } from '../../connection.js';
import { getStatus } from '../../daemon-calls.js';
import { managerInputs, managerRunner } from '../../service/control.js';
import { assertReachable, describeStep, executeSteps, installedService, serviceManager, type StepDeps } from '../../service/manager.js';
import { serviceEnvironment, serviceNode, toolDirs, type CommandRunner, type ServiceManager, type ServiceSpec, type ServiceStep } from '../../service/service.js';
import { printJson, runAction } from '../output.js';
import { stopDaemon, stoppedWithin } from './lifecycle.js';
import { purgeThroughDaemon, removeOwnDirs } from '../../purge.js';
import type { PurgeResponse } from '../../../shared/contracts/purge.js';
import { withProgress } from '../progress.js';

/** launchd's bootout can take seconds to finish a job that is stopping gracefully (≤ 5 s). */
const UNLOAD_WAIT_MS = 15_000;
/** The purging daemon stops once it has answered, within its own graceful bound. */
const PURGE_STOP_MS = 10_000;

interface Flags {
  dryRun?: boolean;
  json?: boolean;
}

interface UninstallFlags extends Flags {
  purge?: boolean;
}

async function installSpec(paths: SandboxdPaths): Promise<ServiceSpec> {
  const node = await serviceNode(process.env.PATH ?? '', process.execPath);
  const platform = currentPlatform();
  return {
    node,
    // npm's global bin is a symlink into the package; the service names the file itself.
    entry: realpathSync(CLI_ENTRY),
    env: serviceEnvironment(process.env, await toolDirs(process.env.PATH ?? ''), node, platform),
    paths,
  };
}

/**
 * A daemon that runs outside the service would hold the lock and make the service's copy fail
 * (launchd would retry it forever): stop it first, unless stopping would cut live sessions off.
 */
async function stopUnmanagedDaemon(json: boolean): Promise<void> {
  let sessions: number;
  try {
    sessions = (await getStatus()).counts.sessions;
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'DAEMON_NOT_RUNNING') return;
    throw error;
  }
  if (sessions > 0) {
    throw new SandboxdError('DAEMON_ALREADY_RUNNING', `a daemon with ${sessions} open session${sessions === 1 ? '' : 's'} is running; installing would stop it`, {
      remedy: 'Run `sandboxd install` again once they end, or `sandboxd stop` first (their containers\' agent stops answering until the service\'s daemon runs).',
    });
  }
  await stopDaemon(json);
}

function report(manager: ServiceManager, steps: readonly ServiceStep[], flags: Flags, done: string): void {
  if (flags.json === true) {
    printJson({ manager: manager.kind, dryRun: flags.dryRun === true, files: manager.files, steps });
    return;
  }
  if (flags.dryRun !== true) {
    process.stdout.write(`${done}\n`);
    return;
  }
  const lines = steps.flatMap((step) => [
    describeStep(step),
    ...(step.kind === 'write' ? step.content.trimEnd().split('\n').map((line) => `    ${line}`) : []),
  ]);
  process.stdout.write(`${lines.join('\n')}\n`);
}

function stepDeps(run: CommandRunner): StepDeps {
  return { run, sleep: (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)), waitTimeoutMs: UNLOAD_WAIT_MS };
}

/** After the service is unloaded: no daemon may be left running, nor its socket left behind. */
async function leaveNothingRunning(json: boolean): Promise<'stopped' | 'not-running'> {
  const stopped = await stopDaemon(json);
  const { socketPath } = clientPaths();
  const stat = await fs.lstat(socketPath).catch(() => null);
  if (stat?.isSocket() === true && stat.uid === (process.getuid?.() ?? 0) && !(await socketAnswers(socketPath, 1_000))) await fs.rm(socketPath, { force: true });
  return stopped;
}

/**
 * `uninstall`: the service unloaded and its files removed (when installed), the daemon stopped
 * whatever started it; with `--purge` a fresh daemon then removes every container, volume and
 * image of sandboxd's and stops, and its directories go. What is left is the package itself.
 */
async function uninstall(flags: UninstallFlags): Promise<number> {
  const json = flags.json === true;
  const dryRun = flags.dryRun === true;
  const platform = currentPlatform();
  const manager = await installedService(managerInputs(process.env, platform));
  const steps = manager?.uninstallSteps() ?? [];
  if (manager !== null && !dryRun) await executeSteps(steps, stepDeps(await managerRunner(process.env, platform)));
  const stopped = dryRun ? 'not-running' : await leaveNothingRunning(json);
  let purged: PurgeResponse | null = null;
  let dirs: Awaited<ReturnType<typeof removeOwnDirs>> | null = null;
  if (flags.purge === true) {
    if (!dryRun) {
      const done = await withProgress('removing sandboxd\'s containers, volumes and images', purgeThroughDaemon(process.env));
      purged = done.purged;
      await stoppedWithin(done.pid, PURGE_STOP_MS);
    }
    dirs = await removeOwnDirs(clientPaths(), process.env.HOME ?? os.homedir(), process.getuid?.() ?? 0, dryRun);
  }
  if (json) {
    printJson({ manager: manager?.kind ?? null, dryRun, files: manager?.files ?? [], steps, stopped: stopped === 'stopped', purged, dirs });
  } else {
    process.stdout.write(uninstallReport({ manager, steps, dryRun, stopped, purged, dirs }));
  }
  for (const failure of purged?.failures ?? []) process.stderr.write(`sandboxd: not purged: ${failure}\n`);
  for (const unreached of purged?.unreached ?? []) process.stderr.write(`sandboxd: not looked at (no record names it): ${unreached}\n`);
  return (purged?.failures.length ?? 0) > 0 ? 1 : 0;
}

function plural(count: number, what: string): string {
  return `${count} ${what}${count === 1 ? '' : 's'}`;
}

function uninstallReport(done: {
  manager: ServiceManager | null;
  steps: readonly ServiceStep[];
  dryRun: boolean;
  stopped: 'stopped' | 'not-running';
  purged: PurgeResponse | null;
  dirs: Awaited<ReturnType<typeof removeOwnDirs>> | null;
}): string {
  const lines: string[] = [];
  if (done.dryRun) {
    lines.push(...done.steps.map(describeStep), 'stop the daemon, if one runs');
    if (done.dirs !== null) lines.push('remove every container, volume and image sandboxd owns, on every engine its records name and on podman and docker here', ...done.dirs.removed.map((dir) => `remove ${dir}`));
  } else {
    lines.push(done.manager === null ? 'sandboxd was not installed as a service' : `sandboxd uninstalled (${done.manager.kind}: ${done.manager.files.join(', ')})`);
    lines.push(done.stopped === 'stopped' ? 'the daemon is stopped' : 'no daemon was running');
    if (done.purged !== null) lines.push(`removed ${plural(done.purged.containers.length, 'container')}, ${plural(done.purged.volumes.length, 'volume')}, ${plural(done.purged.images.length, 'image')}`);
    lines.push(...(done.dirs?.removed ?? []).map((dir) => `removed ${dir}`));
  }
  lines.push(...(done.dirs?.kept ?? []).map(({ dir, why }) => `kept ${dir}: ${why}`));
  if (!done.dryRun) lines.push(done.dirs === null ? 'clients start the daemon themselves again; to remove sandboxd: `sandboxd uninstall --purge`, then `npm uninstall -g sandboxd`' : 'now remove the package: npm uninstall -g sandboxd');
  return `${lines.join('\n')}\n`;
}

export function registerInstallCommands(program: Command): void {
  program
    .command('install')
    .description('start sandboxd at login: a launchd agent (macOS) or systemd user units with socket activation (Linux)')
    .option('--dry-run', 'print the files and commands instead of running them')
    .option('--json', 'print JSON')
    .action(async (flags: Flags) => {
      await runAction(flags.json === true, async () => {
        const paths = clientPaths();
        const platform = currentPlatform();
        const manager = serviceManager(managerInputs(process.env, platform));
        // Rendering refuses a value the unit or plist could not carry, before anything changes.
        const steps = manager.installSteps(await installSpec(paths));
        if (flags.dryRun !== true) {
          const run = await managerRunner(process.env, platform);
          // Without a manager to load it, nothing is stopped or written: the daemon keeps serving.
          await assertReachable(manager, run);
          await stopUnmanagedDaemon(flags.json === true);
          // launchd writes the daemon's stdout/stderr there before the daemon can create it.
          await ensureSecureDir(paths.logDir);
          await executeSteps(steps, stepDeps(run));
        }
        const when = manager.kind === 'launchd' ? 'at login (and now)' : 'on first use, by systemd\'s socket';
        report(manager, steps, flags, `sandboxd installed (${manager.kind}: ${manager.files.join(', ')}); it starts ${when}`);
        return 0;
      });
    });

  program
    .command('uninstall')
    .description('undo `sandboxd install` and stop the daemon; --purge also removes its containers, volumes, images and directories')
    .option('--purge', 'also remove every container, volume and image sandboxd owns and its state, log and runtime directories')
    .option('--dry-run', 'print the files and commands instead of running them')
    .option('--json', 'print JSON')
    .action(async (flags: UninstallFlags) => {
      await runAction(flags.json === true, () => uninstall(flags));
    });
}
