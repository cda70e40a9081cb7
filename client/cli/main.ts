#!/usr/bin/env node
import { Command } from 'commander';
import { VERSION } from '../../daemon/version.js';
import { registerDaemonCommand } from './commands/daemon.js';
import { registerLifecycleCommands } from './commands/lifecycle.js';
import { registerListCommands } from './commands/lists.js';
import { registerPlanCommand } from './commands/plan.js';
import { registerRunCommand } from './commands/run.js';

const program = new Command()
  .name('sandboxd')
  .description('Git and the SSH agent inside Docker/Podman sandboxes, shared across sessions')
  .version(VERSION)
  .showHelpAfterError();

registerDaemonCommand(program);
registerLifecycleCommands(program);
registerListCommands(program);
registerPlanCommand(program);
registerRunCommand(program);

await program.parseAsync(process.argv);
