import { runCli } from '../program.js';
import { registerLifecycleCommands } from '../commands/lifecycle.js';

await runCli([registerLifecycleCommands]);
