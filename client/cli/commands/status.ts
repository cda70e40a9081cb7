import os from 'node:os';
import type { Command } from 'commander';
import type { EngineStatus, StatusResponse } from '../../../shared/contracts/status.js';
import { currentPlatform } from '../../../shared/paths.js';
import { statusOrColdStart } from '../../daemon-status.js';
import { clientPaths } from '../../connection.js';
import { findOtherDaemons, otherDaemonWarnings } from '../../other-daemons.js';
import { engineWithoutAsking, systemProbes } from '../engine-choice.js';
import { EXIT_NOT_RUNNING, formatAge, printJson, runAction } from '../output.js';

/*
 * `sandboxd status` on its own: the most run command loads the status call and nothing of
 * starting or stopping a daemon, so it starts in not much more than Node's own start (the
 * bench's row 7).
 */

/** `sandboxd status`: each Docker engine sessions used, its bridge and its agent probe with age. */
function engineLines(engines: readonly EngineStatus[]): string[] {
  if (engines.length === 0) return [];
  return [
    '  engines:',
    ...engines.flatMap((engine) => [
      `    ${engine.name} (${engine.kind}) at ${engine.endpoint}: bridge ${engine.bridge}`,
      engine.probe === null
        ? '      probe: none yet'
        : `      probe: ${engine.probe.state}, ${engine.probe.detail} (${formatAge(engine.probe.at)} ago)`,
    ]),
  ];
}

/** Never starts a daemon itself; an installed service's socket may, and that start is waited out. */
export function statusOrNull(): Promise<StatusResponse | null> {
  return statusOrColdStart(clientPaths(), process.env);
}

/** `start`, `restart` and `status --json` print one shape: `{ running, ...status }`. */
export function printRunning(status: StatusResponse, json: boolean): void {
  if (json) printJson({ running: true, ...status });
  else process.stdout.write(`sandboxd ${status.version} is running (pid ${status.pid}, ${status.socketPath})\n`);
}

/**
 * The engine `run` and `plan` would use here; never fails the status itself. It asks no engine
 * (status starts no process): with both installed, `run -v` tells which one answered.
 */
async function engineLine(): Promise<string> {
  try {
    const choice = await engineWithoutAsking(undefined, process.env, systemProbes(process.env).find);
    if (choice === 'both') return '  engine:    podman or docker, whichever answers (both on PATH; `run -v` says which, SANDBOXD_ENGINE picks one)';
    return `  engine:    ${choice.engine} (${choice.why})`;
  } catch (error) {
    return `  engine:    none (${error instanceof Error ? error.message : String(error)})`;
  }
}

function statusLines(status: StatusResponse, engine: string): string {
  return (
    [
      `sandboxd ${status.version} is running`,
      `  pid:       ${status.pid}`,
      `  socket:    ${status.socketPath}`,
      `  uptime:    ${formatAge(status.startedAt)}`,
      `  sessions:  ${status.counts.sessions}`,
      `  tunnels:   ${status.counts.tunnels}`,
      `  protocol:  ${status.protocol}`,
      `  log:       ${status.logPath ?? 'stdout'}`,
      engine,
      ...engineLines(status.engines),
    ].join('\n') + '\n'
  );
}

/** On stderr, so `--json` output stays one shape: a stray daemon or socket of an earlier layout. */
async function warnAboutOthers(): Promise<void> {
  const env = process.env;
  const inputs = { platform: currentPlatform(), env, uid: process.getuid?.() ?? 0, home: env.HOME ?? os.homedir() };
  for (const warning of otherDaemonWarnings(await findOtherDaemons(inputs, clientPaths()))) {
    process.stderr.write(`sandboxd: warning: ${warning.detail}\n  ${warning.remedy}\n`);
  }
}

export function registerStatusCommand(program: Command): void {
  program
    .command('status')
    .description('show whether the daemon runs (exit 3 when not); never starts one')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      const json = options.json === true;
      await runAction(json, async () => {
        const [status, engine] = await Promise.all([statusOrNull(), json ? '' : engineLine(), warnAboutOthers()]);
        if (status === null) {
          const { socketPath } = clientPaths();
          if (json) printJson({ running: false, socketPath });
          else process.stdout.write(`sandboxd is not running (socket ${socketPath})\n  Start it with \`sandboxd start\`.\n`);
          return EXIT_NOT_RUNNING;
        }
        if (json) printJson({ running: true, ...status });
        else process.stdout.write(statusLines(status, engine));
        return 0;
      });
    });
}
