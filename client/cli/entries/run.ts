import { runCli } from '../program.js';
import { registerRunCommand } from '../commands/run.js';

// A CommonJS script (scripts/bundle.js), run with V8's code cache (code-cache.ts): no top-level await.
void runCli([registerRunCommand]);
