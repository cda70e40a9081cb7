#!/usr/bin/env node
import { Command } from 'commander';
import { VERSION } from '../../daemon/version.js';
import { enableCompileCache } from './compile-cache.js';
import { guardClosedPipes, reportUsage, setCommandName } from './output.js';

/** `tunnels ls`, not `ls`: what the hint tells people to ask `--help` about. */
function fullName(command: Command): string {
  const names: string[] = [];
  for (let at = command; at.parent !== null; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

class UsageError extends Error {
  constructor(
    message: string,
    readonly command: string,
  ) {
    super(message);
  }
}

/** Usage errors leave commander as one exception, reported like every other error (exit 2). */
class SandboxdCommand extends Command {
  override createCommand(name?: string): SandboxdCommand {
    return new SandboxdCommand(name);
  }

  override error(message: string): never {
    throw new UsageError(message.replace(/^error: /, '').replace(/\s*\n\s*/g, ' '), fullName(this));
  }
}

enableCompileCache();
guardClosedPipes();

const program = new SandboxdCommand()
  .name('sandboxd')
  .description('Git and the SSH agent inside Docker/Podman sandboxes, shared across sessions')
  .version(VERSION);
program.hook('preAction', (_program, action) => {
  setCommandName(fullName(action));
});

/**
 * Each command's module, loaded only when that command runs: `sandboxd status` must not pay for
 * the daemon's fastify or the engines' execa (issue 13). Help and unknown names load them all.
 */
const COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  daemon: async () => (await import('./commands/daemon.js')).registerDaemonCommand,
  lifecycle: async () => (await import('./commands/lifecycle.js')).registerLifecycleCommands,
  lists: async () => (await import('./commands/lists.js')).registerListCommands,
  plan: async () => (await import('./commands/plan.js')).registerPlanCommand,
  run: async () => (await import('./commands/run.js')).registerRunCommand,
  install: async () => (await import('./commands/install.js')).registerInstallCommands,
  doctor: async () => (await import('./commands/doctor.js')).registerDoctorCommand,
  logs: async () => (await import('./commands/logs.js')).registerLogsCommand,
  version: async () => (await import('./commands/version.js')).registerVersionCommand,
};
const MODULE_OF: Readonly<Record<string, string>> = {
  daemon: 'daemon',
  start: 'lifecycle',
  stop: 'lifecycle',
  restart: 'lifecycle',
  status: 'lifecycle',
  sessions: 'lists',
  tunnels: 'lists',
  plan: 'plan',
  run: 'run',
  install: 'install',
  uninstall: 'install',
  doctor: 'doctor',
  logs: 'logs',
  version: 'version',
};
/** `--version` needs no command; help, options first and unknown names need them all. */
function modulesFor(first: string | undefined): string[] {
  if (first === '-V' || first === '--version') return [];
  const module = first === undefined ? undefined : MODULE_OF[first];
  return module === undefined ? Object.keys(COMMANDS) : [module];
}

for (const name of modulesFor(process.argv[2])) {
  const load = COMMANDS[name];
  if (load !== undefined) (await load())(program);
}

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  const args = process.argv.slice(2);
  const ownArgs = args.includes('--') ? args.slice(0, args.indexOf('--')) : args;
  process.exitCode = reportUsage(error.message, error.command, ownArgs.includes('--json'));
}
