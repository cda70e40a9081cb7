import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';
import { execa } from 'execa';
import { median, percentile, timed } from './stats.js';

/** The checkout: esbuild bundles the transport programs from their sources. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TRANSPORTS = [
  ['http1', 'hand-written client (client/http1.ts)'],
  ['node-http', 'node:http, kept-alive agent'],
] as const;

/**
 * Node's builtins through process.getBuiltinModule, as scripts/bundle.js bundles the command and
 * the library: an ESM import would build a facade (on Node 24, node:http's loads undici) that the
 * shipped client never pays for, and the rows would measure it.
 */
const builtinsWithoutFacade: Plugin = {
  name: 'builtins-without-facade',
  setup(bundle) {
    bundle.onResolve({ filter: /^node:/ }, (args) => ({ path: args.path, namespace: 'builtin' }));
    bundle.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({ contents: `module.exports = process.getBuiltinModule(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

/** The start (bench/transport-start.ts) and one bundle per transport, as the command is bundled. */
async function bundleTransports(outdir: string): Promise<string> {
  await build({
    absWorkingDir: ROOT,
    entryPoints: { 'transport-start': 'bench/transport-start.ts', ...Object.fromEntries(TRANSPORTS.map(([name]) => [`transport-${name}`, `bench/transport-${name}.ts`])) },
    outdir,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20.19',
    minifyWhitespace: true,
    minifySyntax: true,
    plugins: [builtinsWithoutFacade],
    logLevel: 'warning',
  });
  return path.join(outdir, 'transport-start.js');
}

/**
 * The runtimes a client runs on: the bench's own node, every other node named in
 * SANDBOXD_BENCH_NODES (paths, `:`-separated; CI names a Node 24 installed beside the project) or
 * installed in node_modules, and Bun (llxprt's runtime).
 */
export async function runtimes(bun: string): Promise<{ name: string; command: string }[]> {
  const installed = path.join(ROOT, 'node_modules', 'node', 'bin', 'node');
  const nodes = [process.execPath, ...(process.env.SANDBOXD_BENCH_NODES ?? '').split(':').filter((entry) => entry !== ''), ...(existsSync(installed) ? [installed] : [])];
  const found: { name: string; command: string }[] = [];
  for (const command of nodes) {
    const name = `node ${(await execa(command, ['--version'])).stdout.trim()}`;
    if (!found.some((runtime) => runtime.name === name)) found.push({ name, command });
  }
  found.push({ name: `bun ${(await execa(bun, ['--version'])).stdout.trim()}`, command: bun });
  return found;
}

const signed = (ms: number): string => `${ms < 0 ? '-' : '+'}${Math.abs(ms).toFixed(1)}`;

export interface TransportOptions {
  socketPath: string;
  /** The bench's scratch directory: the bundles and the compile cache go there. */
  dir: string;
  bun: string;
  coldRuns: number;
  warmGets: number;
  /** The socket's floor (node:http in process, kept alive, to a server that answers at once). */
  socketFloor: number[];
}

/**
 * (11) Whether the hand-written client still pays for itself. Per runtime, as fresh processes
 * like a CLI start with the compile cache on (its own, under `dir`): cold, the process's start,
 * the transport's load, one `GET /v1/status` to the daemon and the exit, each transport taking
 * turns with `-e 0` run by run (a drift of the machine's speed lands on all three alike); warm,
 * one process per transport timing each of `warmGets` GETs on its kept connection.
 */
export async function transportRows(options: TransportOptions): Promise<[string, string, string][]> {
  const outdir = path.join(options.dir, 'transport');
  mkdirSync(outdir, { recursive: true });
  const start = await bundleTransports(outdir);
  const env = { ...process.env, XDG_CACHE_HOME: path.join(options.dir, 'transport-cache') };
  const run = (command: string, args: string[]) => execa(command, args, { env, timeout: 30_000 });
  const rows: [string, string, string][] = [];
  for (const runtime of await runtimes(options.bun)) {
    const floor: number[] = [];
    const cold = TRANSPORTS.map((): number[] => []);
    // The first round fills the compile cache and the file cache: not counted.
    for (let round = 0; round <= options.coldRuns; round += 1) {
      const floorMs = await timed(() => run(runtime.command, ['-e', '0']));
      const coldMs: number[] = [];
      for (const [name] of TRANSPORTS) coldMs.push(await timed(() => run(runtime.command, [start, name, options.socketPath, '1'])));
      if (round === 0) continue;
      floor.push(floorMs);
      for (const [index, ms] of coldMs.entries()) cold[index]?.push(ms);
    }
    const floorMs = median(floor);
    rows.push([`(11) ${runtime.name} -e 0 (floor)`, `${floorMs.toFixed(1)} ms`, '']);
    for (const [index, [, label]] of TRANSPORTS.entries()) {
      const ms = median(cold[index] ?? []);
      rows.push([`(11) ${runtime.name}, cold: ${label}`, `${ms.toFixed(1)} ms`, `start + GET /v1/status + exit: ${signed(ms - floorMs)} ms over -e 0 (${(ms / floorMs).toFixed(2)}x)`]);
    }
    // Run by run, what node:http costs more than the hand-written client, and its spread.
    const [hand = [], nodeHttp = []] = cold;
    const saved = nodeHttp.map((ms, index) => ms - (hand[index] ?? NaN));
    rows.push([
      `(11) ${runtime.name}, cold: node:http minus hand-written`,
      `${median(saved).toFixed(1)} ms`,
      `per run; middle half ${percentile(saved, 25).toFixed(1)} to ${percentile(saved, 75).toFixed(1)} ms`,
    ]);
    for (const [name, label] of TRANSPORTS) {
      const times = JSON.parse((await run(runtime.command, [start, name, options.socketPath, String(options.warmGets + 1)])).stdout) as number[];
      rows.push([
        `(11) ${runtime.name}, warm GET p50: ${label}`,
        `${median(times).toFixed(3)} ms`,
        `p99 ${percentile(times, 99).toFixed(3)} ms; ${(median(times) / median(options.socketFloor)).toFixed(2)}x / ${(percentile(times, 99) / percentile(options.socketFloor, 99)).toFixed(2)}x the socket floor's p50 / p99`,
      ]);
    }
  }
  return rows;
}
