/**
 * A client process's start, run by `npm run bench` (bench/transport-rows.ts) as `sandboxd` starts
 * (client/cli/bin.ts): the compile cache on before anything else is compiled, then one bundle,
 * here the program of one transport (bench/transport-gets.ts):
 *
 *   <runtime> transport-start.js <http1|node-http> <socket> <gets>
 */
import { enableCompileCache } from '../client/cli/compile-cache.js';

enableCompileCache();
await import(new URL(`./transport-${process.argv[2] ?? ''}.js`, import.meta.url).href);
