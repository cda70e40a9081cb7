import { runCli } from '../program.js';
import { registerPlanCommand } from '../commands/plan.js';

await runCli([registerPlanCommand]);
