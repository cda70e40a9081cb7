import { runCli } from '../program.js';
import { registerDaemonCommand } from '../commands/daemon.js';

await runCli([registerDaemonCommand]);
