import { promises as fs } from 'node:fs';
import os from 'node:os';
import { dockerStartRemedy, SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';
import { clip } from '../os/text.js';
import { FingerprintCache } from '../cache/fingerprint-cache.js';
import type { Defer } from '../cache/quiet-time.js';
import { findExecutable } from '../os/executables.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { resolveEndpoint, unixSocketOf, type DockerView } from './docker-endpoint.js';
import { parseDockerInfo } from './docker-info.js';
import { identifyEngine, type EngineIdentity } from './identify.js';

/** `docker info` of a stopped Docker Desktop can take seconds before it gives up. */
export const DOCKER_INFO_TIMEOUT_MS = 10_000;
/** Backstop for what the watched files miss (an engine restarted behind a TCP or ssh endpoint). */
export const IDENTITY_TTL_MS = 10_000;

export interface IdentifiedEngine {
  identity: EngineIdentity;
  docker: string;
  /** The environment the session's docker commands run with (never the daemon's). */
  env: Record<string, string>;
  watched: string[];
}

export interface EngineIdentifierDeps {
  run: RunSubprocess;
  platform: Platform;
  now(): number;
  kernelRelease?: string;
  ttlMs?: number;
  defer?: Defer;
}

/** The session's docker environment: its PATH and Docker variables, the daemon user's HOME. */
export function dockerEnv(view: DockerView, sshAuthSock: string | undefined): Record<string, string> {
  const env: Record<string, string> = { PATH: view.path, HOME: view.home };
  if (view.dockerHost !== undefined) env.DOCKER_HOST = view.dockerHost;
  if (view.dockerContext !== undefined) env.DOCKER_CONTEXT = view.dockerContext;
  if (view.dockerConfig !== undefined) env.DOCKER_CONFIG = view.dockerConfig;
  // docker reaches an ssh:// host with ssh, which authenticates with the session's agent.
  if (sshAuthSock !== undefined) env.SSH_AUTH_SOCK = sshAuthSock;
  return env;
}

async function stampOf(file: string | null): Promise<string | null> {
  if (file === null) return null;
  const stat = await fs.stat(file).catch(() => null);
  return stat === null ? null : `${stat.ino}:${stat.mtimeMs}`;
}

async function exists(file: string): Promise<boolean> {
  return file !== '' && (await fs.stat(file).catch(() => null)) !== null;
}

export type IdentifyRequest = DockerView & { sshAuthSock?: string | undefined };

/**
 * Runs the session's `docker info` and says which engine it is (DESIGN §7), shared per session
 * view and single-flight. A local engine's socket is watched: a restarted engine replaces it,
 * which yields a new instance and so a new probe.
 */
export function createEngineIdentifier(deps: EngineIdentifierDeps): FingerprintCache<IdentifyRequest, IdentifiedEngine> {
  const kernelRelease = deps.kernelRelease ?? os.release();
  return new FingerprintCache<IdentifyRequest, IdentifiedEngine>({
    key: (view) => JSON.stringify([view.path, view.dockerHost ?? null, view.dockerContext ?? null, view.dockerConfig ?? null, view.sshAuthSock ?? null]),
    watched: (_view, result) => result.watched,
    now: () => deps.now(),
    ttlMs: deps.ttlMs ?? IDENTITY_TTL_MS,
    defer: deps.defer,
    compute: (view) =>
      identify(view, deps, kernelRelease).catch((error: unknown) => {
        // Starting the engine is what fixes it, and how depends on where it runs.
        if (!(error instanceof SandboxdError && error.code === 'DOCKER_INFO_FAILED')) throw error;
        throw new SandboxdError(error.code, error.message, { remedy: dockerStartRemedy(deps.platform), cause: error });
      }),
  });
}

/** One `docker info` of the session's docker, and what engine it describes. */
async function identify(view: IdentifyRequest, deps: EngineIdentifierDeps, kernelRelease: string): Promise<IdentifiedEngine> {
  const docker = await findExecutable('docker', view.path);
  if (docker === null) {
    throw new SandboxdError('ENGINE_NOT_FOUND', `docker is not on the session's PATH (searched: ${clip(view.path) || '(empty)'})`, {
      remedy: 'Install the docker CLI, or make sure the PATH of the calling shell contains it.',
    });
  }
  const endpoint = await resolveEndpoint(view);
  const socketStamp = await stampOf(unixSocketOf(endpoint.host));
  const env = dockerEnv(view, view.sshAuthSock);
  const result = await deps.run(docker, ['info', '--format', '{{json .}}'], { env, timeoutMs: DOCKER_INFO_TIMEOUT_MS });
  if (result.exitCode === null && result.stdout === '') {
    throw new SandboxdError('DOCKER_INFO_FAILED', `\`docker info\` did not answer within ${DOCKER_INFO_TIMEOUT_MS} ms (engine at ${endpoint.host ?? 'an unknown endpoint'})`);
  }
  const info = parseDockerInfo(result.stdout, result.stderr, result.exitCode);
  const identity = identifyEngine({
    info,
    endpoint: endpoint.host,
    host: { platform: deps.platform, kernelRelease, rootDirOnHost: await exists(info.DockerRootDir) },
    socketStamp,
  });
  return { identity, docker, env, watched: endpoint.watched };
}
