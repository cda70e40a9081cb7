import Fastify, { type FastifyInstance } from 'fastify';
import { SandboxdError } from '../../shared/errors.js';
import { BODY_LIMIT_BYTES, PROTOCOL_HEADER, PROTOCOL_VERSION } from '../../shared/protocol.js';
import { protocolMismatch, requestedProtocol } from '../../shared/protocol-policy.js';
import { DRAIN_ROUTE, SHUTDOWN_ROUTE, STATUS_ROUTE } from '../../shared/contracts/status.js';
import type { Logger } from '../os/logger.js';
import { clientErrorHandler } from './client-errors.js';
import { connectionLimitFor, guardConnections, openFilesSoftLimit } from './connection-guard.js';
import { installErrorHandlers } from './errors.js';

/** How often node looks for requests past `requestTimeoutMs` (its default is 30 s). */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

/**
 * Answered whatever version the client speaks (shared/protocol-policy.ts): any client can learn
 * which daemon runs and how busy it is, and a newer one can have an older one make way.
 */
const VERSION_FREE_ROUTES = new Set([`GET ${STATUS_ROUTE}`, `POST ${SHUTDOWN_ROUTE}`, `POST ${DRAIN_ROUTE}`]);

/** Stands in for fastify's schema compilers: a route that declared a JSON schema fails to register. */
function noSchemaCompiler(): () => never {
  return () => {
    throw new Error('sandboxd routes validate with zod (parseInput, http/errors.ts); fastify JSON schemas are not compiled');
  };
}

export interface HttpServerOptions {
  /** A request (headers and body) must arrive within this, or it is answered REQUEST_TIMEOUT. */
  requestTimeoutMs: number;
  /** Open connections served at once; null derives it from the soft fd limit. */
  maxConnections: number | null;
  logger: Logger;
  /** Every request, before its route: background work waits for a quiet moment. */
  onRequest(): void;
  /** The daemon is closing: requests are answered SHUTTING_DOWN. */
  isClosing(): boolean;
}

/**
 * The daemon's fastify, before any route: every answer carries the error shape and the protocol
 * header, a client of another protocol is refused (but for the version-free routes), and the
 * connections are bounded.
 */
export function createHttpServer(options: HttpServerOptions): FastifyInstance {
  // fastify's own 503-on-close reply has neither our error shape nor the protocol header.
  const app = Fastify({
    logger: false,
    bodyLimit: BODY_LIMIT_BYTES,
    return503OnClosing: false,
    requestTimeout: options.requestTimeoutMs,
    http: { headersTimeout: options.requestTimeoutMs, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS },
    // Parser failures (bad request line, 431, 408) get the error shape and protocol header too.
    clientErrorHandler: clientErrorHandler(options.requestTimeoutMs),
    // Routes declare no JSON schema (zod checks each body, parseInput in http/errors.ts): fastify's own ajv and
    // fast-json-stringify compilers would only be loaded, start-up time for nothing.
    schemaController: { compilersFactory: { buildValidator: noSchemaCompiler, buildSerializer: noSchemaCompiler } },
  });
  const connections = guardConnections(app.server, options.maxConnections ?? connectionLimitFor(openFilesSoftLimit()), options.logger);
  app.addHook('onRequest', (request, reply, done) => {
    options.onRequest();
    if (options.isClosing()) {
      done(new SandboxdError('SHUTTING_DOWN', 'the daemon is shutting down'));
    } else if (!VERSION_FREE_ROUTES.has(`${request.method} ${request.url}`) && requestedProtocol(request.headers[PROTOCOL_HEADER]) !== PROTOCOL_VERSION) {
      done(protocolMismatch(requestedProtocol(request.headers[PROTOCOL_HEADER])));
    } else if (connections.isOverLimit(request.raw.socket)) {
      void reply.header('connection', 'close');
      done(new SandboxdError('DAEMON_BUSY', `${connections.open} connections are open, the limit is ${connections.limit}`));
    } else {
      done();
    }
  });
  // JSON only: anything else is UNSUPPORTED_MEDIA_TYPE rather than a string for the schemas.
  app.removeContentTypeParser('text/plain');
  app.addHook('onSend', async (_request, reply) => {
    void reply.header(PROTOCOL_HEADER, String(PROTOCOL_VERSION));
  });
  installErrorHandlers(app, options.logger);
  // SANDBOXD_LOG_LEVEL=debug: every request with its status and duration.
  app.addHook('onResponse', async (request, reply) => {
    options.logger.debug({ module: 'http', method: request.method, url: request.url.slice(0, 200), status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
  });
  return app;
}
