/*
 * The session contract's plain values, apart from its schemas: a client builds and sends its
 * request with these alone, and loads zod (sessions.ts) only to check the answer.
 */

export const SESSIONS_ROUTE = '/v1/sessions';
export const sessionRoute = (id: string): string => `${SESSIONS_ROUTE}/${encodeURIComponent(id)}`;
export const heartbeatRoute = (id: string): string => `${sessionRoute(id)}/heartbeat`;
/** `DELETE /v1/sessions/:id?remove=container`: end the session and remove its container now. */
export const sessionRemoveRoute = (id: string): string => `${sessionRoute(id)}?remove=container`;
/** One heartbeat for every session a client process holds (`heartbeatRoute` stays for one). */
export const HEARTBEATS_ROUTE = '/v1/heartbeats';
/** Ids per batch: a thousand session ids (about 23 KB) stay well under the 64 KiB body limit; a client sends more in several. */
export const MAX_HEARTBEAT_BATCH = 1000;

/** The engines a session runs on. */
export const ENGINES = ['docker', 'podman'] as const;

/** Whether the agent is forwarded: `auto` forwards it when there is one. */
export const SSH_AGENT_SETTINGS = ['auto', 'on', 'off'] as const;

/** How the agent reaches the container; `auto` decides from engine, platform and connection. */
export const SSH_BRIDGE_SETTINGS = ['auto', 'mount', 'tunnel', 'desktop', 'none'] as const;

/**
 * The session's variables that decide which engine, storage or remote host its container is on:
 * the daemon's own `rm -f` of a session's container must see the same ones as the client's `run`.
 */
export const ENGINE_ENV_NAMES = [
  'CONTAINER_CONNECTION',
  'CONTAINER_HOST',
  'CONTAINER_SSHKEY',
  'CONTAINERS_CONF',
  'CONTAINERS_STORAGE_CONF',
  'PODMAN_CONNECTIONS_CONF',
  'DOCKER_HOST',
  'DOCKER_CONTEXT',
  'DOCKER_CONFIG',
  'XDG_CONFIG_HOME',
] as const;

/**
 * The few variables of the client's environment the daemon may use; nothing else is sent, so a
 * request can never carry a whole environment (DESIGN §9).
 */
export const CLIENT_ENV_NAMES = [...ENGINE_ENV_NAMES, 'TERM', 'COLORTERM', 'GOOGLE_APPLICATION_CREDENTIALS'] as const;
