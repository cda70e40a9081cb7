import { runCli } from '../program.js';

// `--version`: the program alone, no command module.
await runCli([]);
