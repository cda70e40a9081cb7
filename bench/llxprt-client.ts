/**
 * What llxprt's launcher pays for `sandboxd/llxprt`, run by `npm run bench` as its own process
 * under Node and under Bun: the adapter imported by path, then llxprt's agent step on a run
 * argument list of llxprt's shape. It prints three absolute times (performance.timeOrigin-based,
 * so the bench compares them with the moment the first request reached the daemon), and the CPU
 * time spent by then (what a loaded machine inflates least):
 *
 *   node llxprt-client.js <adapter module> <engine>   →   {"start":…,"imported":…,"merged":…,"cpuImported":…,"cpuMerged":…,"forwarded":…}
 *
 * `start` is taken before the first import, so the runtime's own start is not counted.
 */
const now = (): number => performance.timeOrigin + performance.now();
const cpu = (): number => {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
};
const start = now();
const cpuStart = cpu();
const [modulePath = '', engine = 'podman'] = process.argv.slice(2);
const adapter = (await import(modulePath)) as {
  forwardSshAgent(config: { command: string }, args: string[], options?: { setUidGid?: boolean }): Promise<boolean>;
};
const imported = now();
const cpuImported = cpu() - cpuStart;
const args = ['run', '-i', '--rm', '--init', '--workdir', process.cwd(), '--cap-drop=ALL', '--security-opt', 'no-new-privileges', '--volume', `${process.cwd()}:${process.cwd()}`];
const forwarded = await adapter.forwardSshAgent({ command: engine }, args, { setUidGid: false });
const merged = now();
const cpuMerged = cpu() - cpuStart;
process.stdout.write(`${JSON.stringify({ start, imported, merged, cpuImported, cpuMerged, forwarded })}\n`);
