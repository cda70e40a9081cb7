import * as z from 'zod/mini';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../os/text.js';

/**
 * The fields of `docker info --format '{{json .}}'` that identify an engine. Docker Engine, Docker
 * Desktop, OrbStack, Colima, Rancher Desktop and Podman's Docker-compatible API all print this
 * shape (each fills it its own way); anything else in it is ignored.
 */
export const DockerInfo = z.looseObject({
  ID: z._default(z.string(), ''),
  Name: z._default(z.string(), ''),
  OperatingSystem: z._default(z.string(), ''),
  ServerVersion: z._default(z.string(), ''),
  KernelVersion: z._default(z.string(), ''),
  Architecture: z._default(z.string(), ''),
  DockerRootDir: z._default(z.string(), ''),
  Labels: z._default(z.nullable(z.array(z.string())), null),
  Plugins: z.optional(z.nullable(z.looseObject({ Log: z.optional(z.nullable(z.array(z.string()))) }))),
  ProductLicense: z.optional(z.string()),
  /** `name=rootless` among them: a rootless engine, whose container uids other than 0 are sub-uids. */
  SecurityOptions: z.optional(z.nullable(z.array(z.string()))),
  /** Set by docker CLIs ≥ 23 when the server could not be reached; the JSON is then the client's alone. */
  ServerErrors: z.optional(z.nullable(z.array(z.string()))),
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
  const parsed = DockerInfo.safeParse(json, ENGLISH);
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
