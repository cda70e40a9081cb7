import { runCli } from '../program.js';
import { registerInstallCommands } from '../commands/install.js';

await runCli([registerInstallCommands]);
