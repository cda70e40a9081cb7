import { promises as fs, realpathSync } from 'node:fs';
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
import { stopDaemon } from './lifecycle.js';

/** launchd's bootout can take seconds to finish a job that is stopping gracefully (≤ 5 s). */
const UNLOAD_WAIT_MS = 15_000;

interface Flags {
  dryRun?: boolean;
  json?: boolean;
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
async function leaveNothingRunning(json: boolean): Promise<void> {
  await stopDaemon(json);
  const { socketPath } = clientPaths();
  const stat = await fs.lstat(socketPath).catch(() => null);
  if (stat?.isSocket() === true && stat.uid === (process.getuid?.() ?? 0) && !(await socketAnswers(socketPath, 1_000))) await fs.rm(socketPath, { force: true });
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
    .description('undo `sandboxd install`: unload and remove the launchd agent or systemd units')
    .option('--dry-run', 'print the files and commands instead of running them')
    .option('--json', 'print JSON')
    .action(async (flags: Flags) => {
      await runAction(flags.json === true, async () => {
        const platform = currentPlatform();
        const manager = await installedService(managerInputs(process.env, platform));
        if (manager === null) {
          if (flags.json === true) printJson({ manager: null, dryRun: flags.dryRun === true, files: [], steps: [] });
          else process.stdout.write('sandboxd is not installed as a service\n');
          return 0;
        }
        const steps = manager.uninstallSteps();
        if (flags.dryRun !== true) {
          await executeSteps(steps, stepDeps(await managerRunner(process.env, platform)));
          await leaveNothingRunning(flags.json === true);
        }
        report(manager, steps, flags, `sandboxd uninstalled (${manager.kind}); clients start the daemon themselves again`);
        return 0;
      });
    });
}
