import { runCli } from '../program.js';
import { registerListCommands } from '../commands/lists.js';

await runCli([registerListCommands]);
