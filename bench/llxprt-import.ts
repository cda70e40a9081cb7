import { mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

/** The compiled child (bench/llxprt-client.ts) and the package entry llxprt imports. */
const CLIENT = fileURLToPath(new URL('./llxprt-client.js', import.meta.url));
const ADAPTER = fileURLToPath(new URL('../../dist/client/llxprt/index.js', import.meta.url));

export interface ImportCost {
  /** Import of the adapter, from the first line of the program. */
  importMs: number[];
  /** From the first line to the first byte of the first request at the daemon. */
  firstRequestMs: number[];
  /** From the first line to llxprt's argument list merged (a warm daemon answered). */
  mergedMs: number[];
  /** CPU time (user + system) of the import, and of everything until the merge. */
  importCpuMs: number[];
  mergedCpuMs: number[];
}

interface Times {
  start: number;
  imported: number;
  merged: number;
  cpuImported: number;
  cpuMerged: number;
}

/**
 * A socket in front of the daemon's that notes when each connection's first byte arrives and
 * passes everything through: the client cannot tell it from the daemon, and its clock is the
 * client's (both read performance.timeOrigin + performance.now()).
 */
async function timingProxy(dir: string, daemonSocket: string): Promise<{ socketPath: string; firstByte: number[]; close(): Promise<void> }> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const socketPath = path.join(dir, 'sandboxd.sock');
  const firstByte: number[] = [];
  const server = net.createServer((client) => {
    const daemon = net.connect(daemonSocket);
    client.once('data', () => firstByte.push(performance.timeOrigin + performance.now()));
    client.pipe(daemon).pipe(client);
    client.on('error', () => daemon.destroy());
    daemon.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return { socketPath, firstByte, close: () => new Promise((resolve) => server.close(() => { resolve(); })) };
}

/**
 * Runs the child `runs` times under `runtime` against a warm daemon on `daemonSocket`, through
 * a timing proxy in `dir` (the child's SANDBOXD_RUNTIME_DIR).
 */
export async function llxprtImportCost(runtime: string, env: NodeJS.ProcessEnv, daemonSocket: string, dir: string, runs: number): Promise<ImportCost> {
  const proxy = await timingProxy(dir, daemonSocket);
  const cost: ImportCost = { importMs: [], firstRequestMs: [], mergedMs: [], importCpuMs: [], mergedCpuMs: [] };
  try {
    for (let run = 0; run <= runs; run += 1) {
      const before = proxy.firstByte.length;
      const result = await execa(runtime, [CLIENT, ADAPTER, 'podman'], { env: { ...env, SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_NO_AUTOSTART: '1' }, timeout: 30_000 });
      const times = JSON.parse(result.stdout) as Times;
      const firstByte = proxy.firstByte[before];
      if (firstByte === undefined) throw new Error(`the adapter under ${runtime} sent no request: ${result.stdout} ${result.stderr}`);
      // The first run warms the file cache and the daemon's answers for this client; not counted.
      if (run === 0) continue;
      cost.importMs.push(times.imported - times.start);
      cost.firstRequestMs.push(firstByte - times.start);
      cost.mergedMs.push(times.merged - times.start);
      cost.importCpuMs.push(times.cpuImported);
      cost.mergedCpuMs.push(times.cpuMerged);
    }
  } finally {
    await proxy.close();
  }
  return cost;
}
