import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Engine } from '../../shared/contracts/common.js';
import type { Platform } from '../../shared/paths.js';
import { dockerStartRemedy, SandboxdError } from '../../shared/errors.js';
import { ensureRelayImage, RELAY_BINARY_IN_IMAGE } from '../../daemon/bridges/relay-image.js';
import { OWNER_LABEL } from '../../daemon/os/owner-label.js';
import type { RunSubprocess } from '../../daemon/os/subprocess.js';
import { clip } from '../../daemon/os/text.js';

/** A stopped machine or engine fails at once; a hung one must not hold doctor up. */
const INFO_TIMEOUT_MS = 15_000;
/** A first rootless run sets up its storage: seconds, on a loaded machine more. */
const RUN_TIMEOUT_MS = 60_000;
/** `sandboxd-relay` without arguments prints its usage and exits 2: the container ran it. */
const RELAY_USAGE_EXIT = 2;

/** What starting a minimal container through the engine showed, step by step. */
export type ContainerProbe =
  | { step: 'engine'; reason: string }
  | { step: 'image'; reason: string }
  | { step: 'run'; reason: string; command: string }
  | { step: 'network'; reason: string; command: string }
  | { step: 'ok'; image: string };

export interface ContainerProbeDeps {
  run: RunSubprocess;
  /** The engine binary (on PATH), and the environment it runs with (the user's). */
  binary: string;
  env: Record<string, string>;
  /** This user's owner label, so a container doctor left behind is swept like any of sandboxd's. */
  owner: string;
}

/** What an engine said, in one line: podman folds a helper's output into one with `\n` escapes. */
export function engineSaid(stderr: string, fallback: string): string {
  const lines = stderr
    .split('\n')
    .map((line) => line.trim())
    // docker's closing `Run 'docker run --help'` line, podman's warnings and a `--format` template
    // failing on the missing answer say nothing of the cause.
    .filter((line) => line !== '' && !/^Run '.*--help' for more information/.test(line) && !/^time=.* level=warning/.test(line) && !line.startsWith('template:'));
  const line = lines.find((candidate) => /^Error|Cannot connect/.test(candidate)) ?? lines.at(-1) ?? fallback;
  const parts = line.replaceAll('\\"', '"').split('\\n').map((part) => part.trim());
  const said = [...new Set(parts.filter((part) => part !== '' && part !== '"' && !part.startsWith('WARNING:')))].join('; ');
  return clip(said, 300);
}

function quoteArg(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * The architecture the engine's server runs containers for, which only an answering server can
 * say: `podman info`, `docker version` (whose failure, unlike `docker info`'s, is on stderr).
 */
async function serverArch(engine: Engine, deps: ContainerProbeDeps): Promise<{ arch: string } | { reason: string }> {
  const args = engine === 'podman' ? ['info', '--format', '{{.Host.Arch}}'] : ['version', '--format', '{{.Server.Arch}}'];
  const result = await deps.run(deps.binary, args, { env: deps.env, timeoutMs: INFO_TIMEOUT_MS });
  const arch = result.stdout.trim();
  if (result.exitCode === 0 && arch !== '' && !arch.includes('<no value>')) return { arch };
  if (result.exitCode === null && result.stdout === '') return { reason: `\`${engine} ${args[0] ?? ''}\` did not answer within ${INFO_TIMEOUT_MS / 1000} s` };
  return { reason: engineSaid(result.stderr, `\`${engine} ${args[0] ?? ''}\` exited ${String(result.exitCode ?? 'by a signal')}`) };
}

/**
 * Starts sandboxd's own one-file image (its relay binary, imported from the package: no registry,
 * nothing of the user's) through the engine, bounded: first with no network, then with the
 * engine's default network, as a plain `run` gets it. The first failure is the answer.
 */
export async function probeContainer(engine: Engine, deps: ContainerProbeDeps): Promise<ContainerProbe> {
  const arch = await serverArch(engine, deps);
  if ('reason' in arch) return { step: 'engine', reason: arch.reason };
  const workDir = await mkdtemp(path.join(os.tmpdir(), 'sandboxd-doctor-'));
  let image: string;
  try {
    image = await ensureRelayImage(arch.arch, { run: deps.run, docker: deps.binary, env: deps.env, workDir });
  } catch (error) {
    return { step: 'image', reason: error instanceof SandboxdError ? error.message : String(error) };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
  const runArgs = (network: string[]): string[] => [
    'run', '--rm', '--pull', 'never', ...network, '--label', `${OWNER_LABEL}=${deps.owner}`, '--label', 'sandboxd.helper=doctor',
    '--cap-drop', 'ALL', '--read-only', '--security-opt', 'no-new-privileges', '--entrypoint', RELAY_BINARY_IN_IMAGE, image,
  ];
  for (const [step, network] of [['run', ['--network', 'none']], ['network', []]] as const) {
    const args = runArgs([...network]);
    const result = await deps.run(deps.binary, args, { env: deps.env, timeoutMs: RUN_TIMEOUT_MS });
    if (result.exitCode === RELAY_USAGE_EXIT && result.stderr.includes('usage: sandboxd-relay')) continue;
    const reason = result.exitCode === null ? `it did not finish within ${RUN_TIMEOUT_MS / 1000} s` : engineSaid(result.stderr, `exit ${String(result.exitCode)}`);
    return { step, reason, command: [engine, ...args].map(quoteArg).join(' ') };
  }
  return { step: 'ok', image };
}

/** Where the engine's server runs, for saying how to start it. */
export function engineStartRemedy(engine: Engine, platform: Platform): string {
  if (engine === 'docker') return dockerStartRemedy(platform);
  return platform === 'darwin'
    ? 'Start the machine: `podman machine start` (or `podman machine init` first).'
    : 'Run `podman info` to see what podman needs here (its storage, its runtime, CONTAINER_HOST).';
}
