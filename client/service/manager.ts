import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';
import { launchdManager } from './launchd.js';
import { isExecutableFile } from '../../daemon/os/executables.js';
import { fileExists, type CommandRunner, type ServiceManager, type ServiceStep } from './service.js';
import { systemdManager, systemdUnitDir } from './systemd.js';
import { readTemplate } from './templates.js';

export interface ManagerInputs {
  platform: Platform;
  env: NodeJS.ProcessEnv;
  home: string;
  uid: number;
}

/** The user's login name: USER where it names this uid's account, else the account's own. */
function loginName(env: NodeJS.ProcessEnv, uid: number): string {
  try {
    const account = os.userInfo();
    return account.uid === uid ? account.username : (env.USER ?? account.username);
  } catch {
    return env.USER ?? env.LOGNAME ?? String(uid);
  }
}

/** launchd on macOS, systemd's user instance on Linux. */
export function serviceManager({ platform, env, home, uid }: ManagerInputs): ServiceManager {
  if (platform === 'darwin') return launchdManager({ home, uid, template: () => readTemplate('launchd', 'sandboxd.plist') });
  return systemdManager({
    unitDir: systemdUnitDir(env, home),
    user: loginName(env, uid),
    templates: () => ({ service: readTemplate('systemd', 'sandboxd.service'), socket: readTemplate('systemd', 'sandboxd.socket') }),
  });
}

/** The manager when `sandboxd install` put sandboxd under it, else null: then clients start the daemon themselves. */
export async function installedService(inputs: ManagerInputs): Promise<ServiceManager | null> {
  const manager = serviceManager(inputs);
  const [primary] = manager.files;
  return primary !== undefined && (await fileExists(primary)) ? manager : null;
}

/**
 * Whether the user's service manager answers from this shell; SERVICE_MANAGER_UNREACHABLE (with
 * what it said and a remedy that does not fail the same way) when not.
 */
export async function assertReachable(manager: ServiceManager, run: CommandRunner): Promise<void> {
  const [file = '', ...args] = manager.reachableArgv;
  const result = await run(file, args);
  if (result.exitCode === 0) return;
  const absent = await manager.absent();
  if (absent !== null) {
    throw new SandboxdError('SERVICE_MANAGER_UNREACHABLE', absent, {
      remedy: 'Skip `sandboxd install`: every sandboxd command and the library start the daemon when it is needed (auto-start).',
    });
  }
  const said = (result.stderr.trim() || result.stdout.trim()).split('\n').slice(-2).join(' ');
  throw new SandboxdError('SERVICE_MANAGER_UNREACHABLE', `${manager.kind} cannot be reached from this shell: \`${manager.reachableArgv.join(' ')}\` failed${said === '' ? '' : `: ${said}`}`, {
    remedy: manager.unreachableRemedy,
  });
}

/**
 * What is wrong with the installed service's command: its program or entry script is gone (an
 * upgrade of node or of sandboxd moved it), or the file names none. Null when both exist.
 */
export async function programProblem(manager: ServiceManager): Promise<string | null> {
  const argv = await manager.program();
  const [program, entry] = argv ?? [];
  if (program === undefined || entry === undefined) return `${manager.files[0] ?? manager.kind} names no program to run`;
  if (!(await isExecutableFile(program))) return `the service's program ${program} is missing`;
  if (!(await fileExists(entry))) return `the service's entry script ${entry} is missing`;
  return null;
}

/** One line per step, for `--dry-run` and progress. */
export function describeStep(step: ServiceStep): string {
  switch (step.kind) {
    case 'write':
      return `write ${step.path}`;
    case 'remove':
      return `remove ${step.path}`;
    case 'run':
      return `run ${step.argv.join(' ')}${step.mayFail === true ? ' (may fail: nothing to undo)' : ''}`;
    case 'wait-until-fails':
      return `wait for ${step.what} (until \`${step.argv.join(' ')}\` fails)`;
  }
}

export interface StepDeps {
  run: CommandRunner;
  sleep(ms: number): Promise<void>;
  /** Bounds each `wait-until-fails`. */
  waitTimeoutMs: number;
}

const WAIT_POLL_MS = 100;

/** Runs a command of the manager; its failure is SERVICE_FAILED naming the command and its output. */
export async function runManaged(argv: readonly string[], run: CommandRunner): Promise<void> {
  const [file = '', ...args] = argv;
  const result = await run(file, args);
  if (result.exitCode === 0) return;
  const output = (result.stderr.trim() || result.stdout.trim()).split('\n').slice(-3).join(' ');
  throw new SandboxdError('SERVICE_FAILED', `\`${argv.join(' ')}\` failed (exit ${result.exitCode ?? 'none'})${output === '' ? '' : `: ${output}`}`);
}

export async function executeSteps(steps: readonly ServiceStep[], deps: StepDeps): Promise<void> {
  for (const step of steps) {
    switch (step.kind) {
      case 'write': {
        await fs.mkdir(path.dirname(step.path), { recursive: true });
        // Atomic: a half-written unit must never be what the manager loads.
        const temporary = `${step.path}.${process.pid}.tmp`;
        await fs.writeFile(temporary, step.content, { mode: 0o644 });
        await fs.rename(temporary, step.path);
        break;
      }
      case 'remove':
        await fs.rm(step.path, { force: true });
        break;
      case 'run':
        if (step.mayFail === true) {
          const [file = '', ...args] = step.argv;
          await deps.run(file, args);
        } else await runManaged(step.argv, deps.run);
        break;
      case 'wait-until-fails': {
        const [file = '', ...args] = step.argv;
        const deadline = Date.now() + deps.waitTimeoutMs;
        while ((await deps.run(file, args)).exitCode === 0) {
          if (Date.now() > deadline) {
            throw new SandboxdError('SERVICE_FAILED', `timed out after ${deps.waitTimeoutMs} ms waiting for ${step.what}`, {
              remedy: `Check \`${step.argv.join(' ')}\`, then run the command again.`,
            });
          }
          await deps.sleep(WAIT_POLL_MS);
        }
        break;
      }
    }
  }
}
