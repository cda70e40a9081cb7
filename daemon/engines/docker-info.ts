import * as z from 'zod';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../clip.js';

/**
 * The fields of `docker info --format '{{json .}}'` that identify an engine. Docker Engine, Docker
 * Desktop, OrbStack, Colima, Rancher Desktop and Podman's Docker-compatible API all print this
 * shape (each fills it its own way); anything else in it is ignored.
 */
export const DockerInfo = z.looseObject({
  ID: z.string().default(''),
  Name: z.string().default(''),
  OperatingSystem: z.string().default(''),
  ServerVersion: z.string().default(''),
  KernelVersion: z.string().default(''),
  Architecture: z.string().default(''),
  DockerRootDir: z.string().default(''),
  Labels: z.array(z.string()).nullable().default(null),
  Plugins: z.looseObject({ Log: z.array(z.string()).nullable().optional() }).nullable().optional(),
  ProductLicense: z.string().optional(),
  /** Set by docker CLIs ≥ 23 when the server could not be reached; the JSON is then the client's alone. */
  ServerErrors: z.array(z.string()).nullable().optional(),
});
export type DockerInfo = z.infer<typeof DockerInfo>;

/** A `docker info` that ran: its JSON, or why there is none. */
export function parseDockerInfo(stdout: string, stderr: string, exitCode: number | null): DockerInfo {
  const serverError = (): string => clip(stderr.trim().split('\n').find((line) => line.trim() !== '') ?? `docker info exited ${String(exitCode ?? 'by a signal')}`);
  let json: unknown;
  try {
    json = JSON.parse(stdout);
  } catch {
    throw new SandboxdError('DOCKER_INFO_FAILED', `\`docker info\` gave no engine description: ${exitCode === 0 ? `not JSON: ${clip(stdout.slice(0, 120))}` : serverError()}`);
  }
  const parsed = DockerInfo.safeParse(json);
  if (!parsed.success) throw new SandboxdError('DOCKER_INFO_FAILED', `\`docker info\` printed JSON of an unexpected shape: ${parsed.error.issues[0]?.message ?? 'unknown'}`);
  const errors = parsed.data.ServerErrors ?? [];
  if (errors.length > 0 || parsed.data.ServerVersion === '') {
    throw new SandboxdError('DOCKER_INFO_FAILED', `the Docker engine did not answer \`docker info\`: ${clip(errors[0] ?? serverError())}`);
  }
  return parsed.data;
}

/** `Labels` as a map (`com.docker.desktop.address=unix:///…`). */
export function labelsOf(info: DockerInfo): Map<string, string> {
  const labels = new Map<string, string>();
  for (const label of info.Labels ?? []) {
    const equals = label.indexOf('=');
    labels.set(equals === -1 ? label : label.slice(0, equals), equals === -1 ? '' : label.slice(equals + 1));
  }
  return labels;
}
