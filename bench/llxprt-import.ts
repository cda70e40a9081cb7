import { mkdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

/** The compiled child (bench/llxprt-client.ts) and the package entry llxprt imports. */
const CLIENT = fileURLToPath(new URL('./llxprt-client.js', import.meta.url));
export const ADAPTER = fileURLToPath(new URL('../../dist/client/llxprt/index.js', import.meta.url));

/**
 * How the child runs (bench/llxprt-client.ts): in a process shaped like llxprt's, or bare; on
 * Bun's socket or node:net; or bundled with the adapter as llxprt ships (`bun build`, Bun only).
 */
export type LaunchShape = 'llxprt' | 'bare' | 'node-net' | 'bundled';

/**
 * The child and the adapter in one file, as llxprt's `bun build` makes its CLI: the adapter is
 * imported lazily, so it stays a lazily run part of the bundle.
 */
async function bundledClient(dir: string, bun: string, adapter: string, name: string): Promise<string> {
  const entry = path.join(dir, `${name}-entry.mjs`);
  writeFileSync(entry, `globalThis.sandboxdAdapter = () => import(${JSON.stringify(adapter)});\nawait import(${JSON.stringify(CLIENT)});\n`);
  const outfile = path.join(dir, `${name}.js`);
  await execa(bun, ['build', entry, '--target=bun', '--outfile', outfile]);
  return outfile;
}

export interface LaunchCost {
  /** Import of the adapter, from the launch path's first line. */
  importMs: number[];
  /** From the first line to the first byte of the acquire at the daemon. */
  firstRequestMs: number[];
  /** From the import done to the acquire's first byte at the daemon: the client's work before it asks. */
  beforeRequestMs: number[];
  /** From the acquire's first byte at the daemon to the last byte of its answer: the daemon's share. */
  daemonMs: number[];
  /** From the answer's last byte to llxprt's argument list merged: the client's work on the answer. */
  afterMs: number[];
  /** From the first line to llxprt's argument list merged: what the launch pays. */
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
  forwarded: { sshAgent: boolean; credentialSocket?: string };
}

const clock = (): number => performance.timeOrigin + performance.now();

/** The first and last moments of one connection through the proxy: the client's first byte, the daemon's last. */
interface Passage {
  firstIn: number;
  lastOut: number;
}

/**
 * A socket in front of the daemon's that notes when each connection's first byte arrives and when
 * the daemon's last byte leaves, and passes everything through: the client cannot tell it from the
 * daemon, and its clock is the client's (both read performance.timeOrigin + performance.now()).
 */
async function timingProxy(dir: string, daemonSocket: string): Promise<{ socketPath: string; passages: Passage[]; close(): Promise<void> }> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const socketPath = path.join(dir, 'sandboxd.sock');
  const passages: Passage[] = [];
  const server = net.createServer((client) => {
    const daemon = net.connect(daemonSocket);
    let passage: Passage | null = null;
    client.on('data', (chunk) => {
      if (passage === null) passages.push((passage = { firstIn: clock(), lastOut: 0 }));
      daemon.write(chunk);
    });
    daemon.on('data', (chunk) => {
      if (passage !== null) passage.lastOut = clock();
      client.write(chunk);
    });
    client.on('end', () => daemon.end());
    daemon.on('end', () => client.end());
    client.on('error', () => daemon.destroy());
    daemon.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return { socketPath, passages, close: () => new Promise((resolve) => server.close(() => { resolve(); })) };
}

/** llxprt's credential proxy as the daemon meets it: a socket that listens, in llxprt's tmpdir. */
async function credentialProxy(dir: string): Promise<{ socketPath: string; close(): Promise<void> }> {
  const socketPath = path.join(dir, 'credential.sock');
  const server = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return { socketPath, close: () => new Promise((resolve) => server.close(() => { resolve(); })) };
}

/** Where the launches run (default: the bench's own directory), and what happens between two of them. */
export interface LaunchPlace {
  cwd?: string;
  between?: () => Promise<void>;
}

/**
 * Runs the child `runs` times under `runtime` in `shape` against a warm daemon on `daemonSocket`,
 * through a timing proxy in `dir` (the child's SANDBOXD_RUNTIME_DIR).
 */
export async function llxprtLaunchCost(runtime: string, shape: LaunchShape, env: NodeJS.ProcessEnv, daemonSocket: string, dir: string, runs: number, place: LaunchPlace = {}): Promise<LaunchCost> {
  const [cost] = await llxprtLaunchCosts(runtime, shape, env, daemonSocket, dir, runs, place, [ADAPTER]);
  return cost as LaunchCost;
}

/**
 * llxprtLaunchCost for several builds of the adapter (`adapters`: their dist/client/llxprt/index.js)
 * in the same turns, each turn running every build once in a rotating order: a change's before
 * and after measured in one window, under the same load.
 */
export async function llxprtLaunchCosts(runtime: string, shape: LaunchShape, env: NodeJS.ProcessEnv, daemonSocket: string, dir: string, runs: number, place: LaunchPlace, adapters: string[]): Promise<LaunchCost[]> {
  const proxy = await timingProxy(dir, daemonSocket);
  const credential = await credentialProxy(dir);
  const costs = adapters.map((): LaunchCost => ({ importMs: [], firstRequestMs: [], beforeRequestMs: [], daemonMs: [], afterMs: [], mergedMs: [], importCpuMs: [], mergedCpuMs: [] }));
  const flags = shape === 'bare' ? ['bare'] : shape === 'node-net' ? ['node-net'] : [];
  const programs: string[][] = [];
  for (const [index, adapter] of adapters.entries()) programs.push(shape === 'bundled' ? [await bundledClient(dir, runtime, adapter, `llxprt-bundled-${String(index)}`), '-'] : [CLIENT, adapter]);
  try {
    for (let run = 0; run <= runs; run += 1) {
      for (let turn = 0; turn < adapters.length; turn += 1) {
        const which = (run + turn) % adapters.length;
        const before = proxy.passages.length;
        await place.between?.();
        const result = await execa(runtime, [...(programs[which] as string[]), credential.socketPath, ...flags], { env: { ...env, SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_NO_AUTOSTART: '1' }, timeout: 30_000, ...(place.cwd === undefined ? {} : { cwd: place.cwd }) });
        const times = JSON.parse(result.stdout) as Times;
        const acquire = proxy.passages[before];
        if (acquire === undefined) throw new Error(`the adapter under ${runtime} sent no request: ${result.stdout} ${result.stderr}`);
        if (!times.forwarded.sshAgent || times.forwarded.credentialSocket === undefined) {
          throw new Error(`the launch under ${runtime} did not carry both sockets: ${result.stdout} ${result.stderr}`);
        }
        // The first run warms the file cache and the daemon's answers for this client; not counted.
        if (run === 0) continue;
        const cost = costs[which] as LaunchCost;
        cost.importMs.push(times.imported - times.start);
        cost.firstRequestMs.push(acquire.firstIn - times.start);
        cost.beforeRequestMs.push(acquire.firstIn - times.imported);
        cost.daemonMs.push(acquire.lastOut - acquire.firstIn);
        cost.afterMs.push(times.merged - acquire.lastOut);
        cost.mergedMs.push(times.merged - times.start);
        cost.importCpuMs.push(times.cpuImported);
        cost.mergedCpuMs.push(times.cpuMerged);
      }
    }
  } finally {
    await credential.close();
    await proxy.close();
  }
  return costs;
}
