import { runCli } from '../program.js';
import { registerRunCommand } from '../commands/run.js';

await runCli([registerRunCommand]);
