import { runCli } from '../program.js';
import { registerStatusCommand } from '../commands/status.js';

await runCli([registerStatusCommand]);
