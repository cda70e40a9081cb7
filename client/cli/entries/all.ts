import { runCli } from '../program.js';
import { registerDaemonCommand } from '../commands/daemon.js';
import { registerLifecycleCommands } from '../commands/lifecycle.js';
import { registerStatusCommand } from '../commands/status.js';
import { registerListCommands } from '../commands/lists.js';
import { registerPlanCommand } from '../commands/plan.js';
import { registerRunCommand } from '../commands/run.js';
import { registerInstallCommands } from '../commands/install.js';
import { registerDoctorCommand } from '../commands/doctor.js';
import { registerLogsCommand } from '../commands/logs.js';
import { registerVersionCommand } from '../commands/version.js';
import { registerCompletionCommand } from '../commands/completion.js';

// Help, unknown names and completion (which lists them all): every command, in the order --help lists them.
await runCli([
  registerDaemonCommand,
  registerLifecycleCommands,
  registerStatusCommand,
  registerListCommands,
  registerPlanCommand,
  registerRunCommand,
  registerInstallCommands,
  registerDoctorCommand,
  registerLogsCommand,
  registerVersionCommand,
  registerCompletionCommand,
]);
