import { runCli } from '../program.js';
import { registerDaemonCommand } from '../commands/daemon.js';

// A CommonJS script (scripts/bundle.js), run with V8's code cache (code-cache.ts): no top-level await.
void runCli([registerDaemonCommand]);
