import { runCli } from '../program.js';
import { registerLogsCommand } from '../commands/logs.js';

await runCli([registerLogsCommand]);
