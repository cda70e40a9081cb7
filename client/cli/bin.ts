#!/usr/bin/env node
// The `sandboxd` command's entry: it loads the one bundle that holds the command named
// (client/cli/entries/*). One self-contained bundle per command is two files to load instead of a
// graph of shared chunks, each of which costs a start its own resolve and link. `run` and the
// daemon are CommonJS scripts run with V8's code cache (code-cache.ts), which keeps more than
// Node's compile cache does; the other commands are ES modules, loaded once that cache is on (an
// ESM module's static imports are compiled before its body runs). `run` loads no module through
// Node's loader, so it leaves Node's cache off.
import { moduleFor } from './command-modules.js';
import { enableCompileCache } from './compile-cache.js';

const command = moduleFor(process.argv[2]);
if (command === 'run') {
  const { runRunBundle } = await import('./code-cache.js');
  runRunBundle(new URL('./entries/run.cjs', import.meta.url));
} else {
  enableCompileCache();
  if (command === 'daemon') {
    // A CommonJS script with V8's code cache (code-cache.ts), loaded only here.
    const { runDaemonBundle } = await import('./code-cache.js');
    runDaemonBundle(new URL('./entries/daemon.cjs', import.meta.url));
  } else {
    // Named at run time, so the bundler leaves the other commands' bundles out of this one.
    await import(new URL(`./entries/${command}.js`, import.meta.url).href);
  }
}
