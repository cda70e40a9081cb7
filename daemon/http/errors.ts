import type { FastifyError, FastifyInstance } from 'fastify';
import { SandboxdError, type ErrorBody } from '../../shared/errors.js';
import type { Logger } from '../logger.js';

/** Maps fastify's own failures (body parsing, limits) onto the stable codes of shared/errors.ts. */
export function toSandboxdError(error: unknown): SandboxdError {
  if (error instanceof SandboxdError) return error;
  const fastifyError = error as Partial<FastifyError>;
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

export function installErrorHandlers(app: FastifyInstance, logger: Logger): void {
  app.setErrorHandler((error, request, reply) => {
    const mapped = toSandboxdError(error);
    const log = logger.child({ module: 'http', reqId: request.id });
    if (mapped.code === 'INTERNAL') log.error({ err: error, url: request.url }, 'request failed');
    else log.info({ code: mapped.code, url: request.url }, mapped.message);
    const body: ErrorBody = { error: mapped.toJSON() };
    return reply.status(mapped.status).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new SandboxdError('NOT_FOUND', `no route ${request.method} ${request.url.slice(0, 200)}`);
    const body: ErrorBody = { error: error.toJSON() };
    return reply.status(error.status).send(body);
  });
}
