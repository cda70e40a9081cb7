import { runCli } from '../program.js';
import { registerVersionCommand } from '../commands/version.js';

await runCli([registerVersionCommand]);
