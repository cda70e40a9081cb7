import * as z from 'zod/mini';
import { ExecText } from './common.js';
import { ClientEnv } from './sessions.js';

/**
 * `sandboxd uninstall --purge`: the daemon ends every session and removes every container, volume
 * and image of sandboxd's it owns, on every engine its records name and on the engines the
 * client's PATH finds, answers what it removed, then stops.
 */
export const PURGE_ROUTE = '/v1/purge';

/** The client's PATH and engine variables: where its podman and docker are, and which engine they reach. */
export const PurgeRequest = z.strictObject({
  path: z.optional(ExecText(65536)),
  env: z.optional(ClientEnv),
});
export type PurgeRequest = z.infer<typeof PurgeRequest>;

export const PurgeResponse = z.strictObject({
  containers: z.array(z.string()),
  volumes: z.array(z.string()),
  images: z.array(z.string()),
  /** What could not be removed or looked at on an engine sandboxd used, one line each. */
  failures: z.array(z.string()),
  /** Engines on the client's PATH that no record names and that did not answer: nothing known of sandboxd's is there. */
  unreached: z.array(z.string()),
});
export type PurgeResponse = z.infer<typeof PurgeResponse>;
