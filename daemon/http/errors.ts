import type { FastifyError, FastifyInstance } from 'fastify';
import { SandboxdError } from '../../shared/errors.js';
import type { ErrorBody } from '../../shared/contracts/errors.js';
import { clip, ECHO_MAX_CHARS } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import type * as z from 'zod/mini';
import { ENGLISH } from '../../shared/contracts/messages.js';

/**
 * A backstop for messages that echo the caller's input (a 4 KiB cwd): room for one clipped value
 * and the words around it, so a flood of rejected requests cannot grow the log by their size.
 */
const MESSAGE_MAX_CHARS = 2 * ECHO_MAX_CHARS;
const OUT_OF_FDS = new Set(['EMFILE', 'ENFILE']);

/** Maps fastify's own failures (body parsing, limits) onto the stable codes of shared/errors.ts. */
export function toSandboxdError(error: unknown): SandboxdError {
  if (error instanceof SandboxdError) return error;
  const fastifyError = error as Partial<FastifyError>;
  // Any file the daemon opens can fail this way under load; that is a retry, not a bug.
  if (fastifyError.code !== undefined && OUT_OF_FDS.has(fastifyError.code)) {
    return new SandboxdError('DAEMON_BUSY', `the daemon is out of file descriptors (${fastifyError.code})`);
  }
  switch (fastifyError.statusCode) {
    case 413:
      return new SandboxdError('PAYLOAD_TOO_LARGE', 'request body is larger than 64 KiB');
    case 415:
      return new SandboxdError('UNSUPPORTED_MEDIA_TYPE', fastifyError.message ?? 'unsupported content type');
    case 400:
      return new SandboxdError('BAD_REQUEST', fastifyError.message ?? 'bad request');
    default:
      return new SandboxdError('INTERNAL', `internal error: ${(error as Error).message}`);
  }
}

function clipped(error: SandboxdError): SandboxdError {
  if (error.message.length <= MESSAGE_MAX_CHARS) return error;
  return new SandboxdError(error.code, clip(error.message, MESSAGE_MAX_CHARS), { remedy: error.remedy });
}

export function installErrorHandlers(app: FastifyInstance, logger: Logger): void {
  app.setErrorHandler((error, request, reply) => {
    const mapped = clipped(toSandboxdError(error));
    const log = logger.child({ module: 'http', reqId: request.id });
    const url = clip(request.url);
    if (mapped.code === 'INTERNAL') log.error({ err: error, url }, 'request failed');
    else log.info({ code: mapped.code, url }, mapped.message);
    const body: ErrorBody = { error: mapped.toJSON() };
    return reply.status(mapped.status).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new SandboxdError('NOT_FOUND', `no route ${request.method} ${clip(request.url)}`);
    const body: ErrorBody = { error: error.toJSON() };
    return reply.status(error.status).send(body);
  });
}

/** Routes parse their inputs with the shared schemas; a failure is a BAD_REQUEST naming the field. */
export function parseInput<T extends z.ZodMiniType>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value, ENGLISH);
  if (result.success) return result.data;
  const detail = result.error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length === 0 ? what : issue.path.join('.')}: ${issue.message}`)
    .join('; ');
  throw new SandboxdError('BAD_REQUEST', `invalid ${what}: ${detail}`);
}
