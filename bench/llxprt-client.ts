/**
 * What llxprt's launch pays for `sandboxd/llxprt`, run by `npm run bench` as its own process under
 * each runtime: from the launch path's first line (the adapter's lazy import) to llxprt's argument
 * list merged, with llxprt's credential proxy (a listening socket here) carried in the same
 * session. It prints absolute times (performance.timeOrigin-based, so the bench compares them with
 * what its proxy in front of the daemon saw) and the CPU time spent by then:
 *
 *   <runtime> llxprt-client.js <adapter module> <credential socket> [bare] [node-net]
 *   bun llxprt-bundled.js - <credential socket>
 *     →   {"start":…,"imported":…,"merged":…,"cpuImported":…,"cpuMerged":…,"forwarded":…}
 *
 * By default the builtins llxprt's launcher modules import at their top (sandbox-exec.ts,
 * sandbox-containers.ts, sandbox-ssh.ts: node:child_process, node:fs, node:net, node:os,
 * node:path) are loaded, and stdout and stderr opened, before the launch path, as they are in
 * llxprt's process when it gets there; `bare` does neither. `node-net` hides Bun.connect, so the client on Bun connects
 * with node:net instead: the comparison that decides which one the client uses. As llxprt ships
 * it, the adapter is inside llxprt's own bundle (`bun build`): the bench bundles this program the
 * same way (llxprt-bundled.js), the adapter still imported lazily, inside the launch path.
 */
const flags = new Set(process.argv.slice(4));
if (!flags.has('bare')) {
  for (const name of ['node:child_process', 'node:fs', 'node:net', 'node:os', 'node:path']) process.getBuiltinModule(name);
  // llxprt has written to both before it launches.
  for (const stream of [process.stdout, process.stderr]) stream.write('');
}
const bun = (globalThis as { Bun?: { connect?: unknown } }).Bun;
if (flags.has('node-net') && bun !== undefined) bun.connect = undefined;

const now = (): number => performance.timeOrigin + performance.now();
const cpu = (): number => {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
};
const [modulePath = '', credentialSocket = ''] = process.argv.slice(2);
const args = ['run', '-i', '--rm', '--init', '--workdir', process.cwd(), '--cap-drop=ALL', '--security-opt', 'no-new-privileges', '--volume', `${process.cwd()}:${process.cwd()}`];

const start = now();
const cpuStart = cpu();
// A bundle of this program (bench/llxprt-import.ts, as llxprt ships) names the adapter itself.
const load = (globalThis as { sandboxdAdapter?: () => Promise<unknown> }).sandboxdAdapter ?? (() => import(modulePath));
const adapter = (await load()) as {
  forwardThroughSandboxd(config: { command: string }, args: string[], options?: { setUidGid?: boolean; credentialSocket?: string }): Promise<{ sshAgent: boolean; credentialSocket: string | undefined }>;
};
const imported = now();
const cpuImported = cpu() - cpuStart;
const forwarded = await adapter.forwardThroughSandboxd({ command: 'podman' }, args, { setUidGid: false, credentialSocket });
const merged = now();
const cpuMerged = cpu() - cpuStart;
process.stdout.write(`${JSON.stringify({ start, imported, merged, cpuImported, cpuMerged, forwarded })}\n`);
