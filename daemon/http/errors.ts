import type { FastifyError, FastifyInstance } from 'fastify';
import { SandboxdError } from '../../shared/errors.js';
import type { ErrorBody } from '../../shared/contracts/errors.js';
import { clip, ECHO_MAX_CHARS } from '../os/text.js';
import type { Logger } from '../os/logger.js';
import type * as z from 'zod/mini';

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

type Issue = z.core.$ZodIssue;

function limitOf(issue: Issue & { maximum?: number | bigint; minimum?: number | bigint }): string {
  const limit = issue.maximum ?? issue.minimum;
  return limit === undefined ? '' : limit.toString();
}

/**
 * An issue in a person's words: what is wrong with the value, never the schema's terms or a
 * pattern (those stay in the code). The field it names comes first, as the caller formats it.
 */
function plainIssue(issue: Issue): string {
  switch (issue.code) {
    case 'too_big':
      return issue.origin === 'string' ? `is longer than ${limitOf(issue)} characters` : issue.origin === 'array' ? `has more than ${limitOf(issue)} entries` : `is larger than ${limitOf(issue)}`;
    case 'too_small':
      if (limitOf(issue) === '1' && (issue.origin === 'string' || issue.origin === 'array')) return 'is empty';
      if (issue.origin === 'string') return `is shorter than ${limitOf(issue)} characters`;
      return issue.origin === 'array' ? `has fewer than ${limitOf(issue)} entries` : `is smaller than ${limitOf(issue)}`;
    case 'invalid_type':
      return issue.input === undefined ? 'is missing' : `must be a ${issue.expected}`;
    case 'invalid_value':
      return `must be one of ${issue.values.map(String).join(', ')}`;
    case 'invalid_format':
      return 'is not in the form sandboxd expects';
    case 'unrecognized_keys':
      return `has fields sandboxd does not know (${issue.keys.join(', ')})`;
    case 'custom':
      return issue.message;
    default:
      return 'is not a value sandboxd accepts';
  }
}

/** Routes parse their inputs with the shared schemas; a failure is a BAD_REQUEST naming the field. */
export function parseInput<T extends z.ZodMiniType>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.slice(0, 5);
  // A route parameter (`session id`) is the whole value: named once, as the person gave it.
  if (issues.every((issue) => issue.path.length <= 1 && what.endsWith(` ${String(issue.path[0] ?? 'id')}`))) {
    const key = issues[0]?.path[0];
    const given = key === undefined || typeof value !== 'object' || value === null ? undefined : (value as Record<PropertyKey, unknown>)[key];
    const shown = typeof given === 'string' ? ` ${JSON.stringify(clip(given, 80))}` : '';
    throw new SandboxdError('BAD_REQUEST', `the ${what}${shown} ${issues.map(plainIssue).join(' and ')}`);
  }
  const detail = issues.map((issue) => (issue.path.length === 0 ? plainIssue(issue) : `${issue.path.join('.')}: ${plainIssue(issue)}`)).join('; ');
  throw new SandboxdError('BAD_REQUEST', `invalid ${what}: ${detail}`);
}
