import { createHash } from 'node:crypto';
import path from 'node:path';
import * as z from 'zod/mini';
import { readStateFile } from '../os/state-file.js';

/** The Docker variables of a session (the client sends them; the daemon's own never count). */
export interface DockerView {
  path: string;
  dockerHost?: string | undefined;
  dockerContext?: string | undefined;
  dockerConfig?: string | undefined;
  /** The daemon user's home, where docker finds `~/.docker` without DOCKER_CONFIG. */
  home: string;
}

export interface DockerEndpoint {
  /** `unix:///var/run/docker.sock`, `ssh://user@host`, `tcp://…`; null when the context names none. */
  host: string | null;
  /** Files whose change may mean another endpoint (or a restarted engine, for a local socket). */
  watched: string[];
}

const DEFAULT_HOST = 'unix:///var/run/docker.sock';
const Config = z.looseObject({ currentContext: z.optional(z.string()) });
const ContextMeta = z.looseObject({ Endpoints: z.optional(z.looseObject({ docker: z.optional(z.looseObject({ Host: z.optional(z.string()) })) })) });

export function configDir(view: DockerView): string {
  return view.dockerConfig !== undefined && view.dockerConfig !== '' ? view.dockerConfig : path.join(view.home, '.docker');
}

/** docker's own layout: `contexts/meta/<sha256 of the name>/meta.json`. */
export function contextMetaPath(dir: string, name: string): string {
  return path.join(dir, 'contexts', 'meta', createHash('sha256').update(name).digest('hex'), 'meta.json');
}

async function readJson<T>(file: string, schema: z.ZodMiniType<T>): Promise<T | null> {
  try {
    // docker's own files, often linked from dotfiles: followed, but a FIFO or device is never waited on.
    const text = await readStateFile(file, { followSymlink: true, maxBytes: 1024 * 1024 });
    if (text === null) return null;
    const parsed = schema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The local socket behind a `unix://` host, whose replacement means the engine restarted. */
export function unixSocketOf(host: string | null): string | null {
  return host?.startsWith('unix://') === true ? host.slice('unix://'.length) : null;
}

/**
 * Where the session's docker CLI connects, as docker decides it: DOCKER_HOST, else the context
 * DOCKER_CONTEXT or config.json's `currentContext` names, else the default socket. Read from
 * files, not from `docker context inspect`, so it costs no process.
 */
export async function resolveEndpoint(view: DockerView): Promise<DockerEndpoint> {
  const dir = configDir(view);
  const configFile = path.join(dir, 'config.json');
  const withSocket = (host: string | null, files: string[]): DockerEndpoint => {
    const socket = unixSocketOf(host);
    return { host, watched: socket === null ? files : [...files, socket] };
  };
  if (view.dockerHost !== undefined && view.dockerHost !== '') return withSocket(view.dockerHost, []);
  const name = view.dockerContext !== undefined && view.dockerContext !== '' ? view.dockerContext : ((await readJson(configFile, Config))?.currentContext ?? 'default');
  if (name === 'default') return withSocket(DEFAULT_HOST, [configFile]);
  const meta = contextMetaPath(dir, name);
  return withSocket((await readJson(meta, ContextMeta))?.Endpoints?.docker?.Host ?? null, [configFile, meta]);
}
