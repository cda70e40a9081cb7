import { Command } from 'commander';
import { VERSION } from '../../daemon/os/package-files.js';
import { guardClosedPipes, reportUsage, setCommandName } from './output.js';

/** `tunnels ls`, not `ls`: what the hint tells people to ask `--help` about. */
function fullName(command: Command): string {
  const names: string[] = [];
  for (let at = command; at.parent !== null; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

/** What a command adds to commander's "unknown option" (run: its run arguments go after `--`). */
const UNKNOWN_OPTION_HINTS = new WeakMap<Command, string>();

/** Says `hint` after "unknown option …" for `command`. */
export function unknownOptionHint(command: Command, hint: string): void {
  UNKNOWN_OPTION_HINTS.set(command, hint);
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
    const text = message.replace(/^error: /, '').replace(/\s*\n\s*/g, ' ');
    const hint = /^unknown option/.test(text) ? UNKNOWN_OPTION_HINTS.get(this) : undefined;
    throw new UsageError(hint === undefined ? text : `${text} (${hint})`, fullName(this));
  }
}

/**
 * Parses the command line with the commands `registrars` add and runs the one named. Usage errors
 * leave as one exception, reported like every other error (exit 2).
 */
export async function runCli(registrars: readonly ((program: Command) => void)[]): Promise<void> {
  guardClosedPipes();
  const program = new SandboxdCommand()
    .name('sandboxd')
    .description('Git and the SSH agent inside Docker/Podman sandboxes, shared across sessions')
    .version(VERSION);
  program.hook('preAction', (_program, action) => {
    setCommandName(fullName(action));
  });
  for (const register of registrars) register(program);
  // Bare `sandboxd`, as `docker` and `podman` do: the help on stdout, exit 0.
  if (process.argv.length <= 2) {
    program.outputHelp();
    return;
  }
  try {
    await program.parseAsync(process.argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    const args = process.argv.slice(2);
    const ownArgs = args.includes('--') ? args.slice(0, args.indexOf('--')) : args;
    process.exitCode = reportUsage(error.message, error.command, ownArgs.includes('--json'));
  }
}
