import type * as z from 'zod/mini';
import { SandboxdError } from '../shared/errors.js';
import { PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';
import { checkShape, primeShape, type Shape, type ShapeIssue } from '../shared/contracts/shape.js';
import { exchange, ExchangeTimeout, MalformedReply, unreachable, type Reply } from './http1.js';
import { assertTrustedSocket } from './trust.js';

/** Default bound for one request; acquire may wait on a tunnel, so it passes a longer one. */
export const REQUEST_TIMEOUT_MS = 10_000;

export interface RequestOptions {
  socketPath: string;
  method: 'GET' | 'POST' | 'DELETE';
  route: string;
  body?: unknown;
  timeoutMs?: number;
  /** Read a reply of any protocol version (only to learn which daemon runs; the schema must be loose). */
  anyProtocol?: boolean;
  /**
   * The daemon stops after answering: the connection is not kept, or a graceful server close
   * would wait out its keep-alive timeout before the process can exit.
   */
  closeConnection?: boolean;
  /** Sending it twice does no more than once (a heartbeat): it may use a kept connection. GET always may. */
  idempotent?: boolean;
  /**
   * Runs once the request is written, while the daemon works on it: first-use work on what the
   * caller does with the answer. It must not act, as the request may still fail.
   */
  whileWaiting?: () => void;
}

/**
 * A client parses each answer once: zod's compiled fast path (a `new Function` per object
 * schema, built on first use) costs a short command more than it saves. No locale is loaded:
 * zod's wording never reaches a person (contractBreak says where an answer went wrong).
 */
const ONE_SHOT = { jitless: true } as const;

/** Where an answer breaks the contract, in this client's words. */
function contractBreak(issue: z.core.$ZodIssue | ShapeIssue | undefined): string {
  const where = issue === undefined || issue.path.length === 0 ? 'the answer' : issue.path.map(String).join('.');
  if (issue?.code === 'unrecognized_keys') return `${where} carries ${(issue.keys ?? []).join(', ')}, which this client does not know`;
  return `${where} is not what this client reads`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * The answer's schema, or how to load it: loaded once the request is written, it (and zod) load
 * while the daemon works on the answer instead of before the request leaves. An answer a client
 * reads on every launch is checked against its shape instead (shared/contracts/answer-shapes.ts),
 * which needs no zod at all.
 */
export type SchemaSource<T extends z.ZodMiniType> = T | (() => Promise<T>);

function isShape(check: unknown): check is Shape<unknown> {
  return typeof check === 'object' && check !== null && 'root' in check;
}

/** Failures of a request that acts (not a GET) which the daemon read and never answered. */
const unanswered = new WeakSet<SandboxdError>();

/**
 * Whether `error` is a request that acts, written to the daemon, whose connection died before any
 * answer: the daemon may have done it. Sending it again is safe only once that daemon is gone.
 */
export function sentUnanswered(error: unknown): boolean {
  return error instanceof SandboxdError && unanswered.has(error);
}

/**
 * One JSON request over the daemon's Unix socket, with the response checked against its shared
 * schema (STYLE 1), or the shape generated from it, and the daemon's protocol version checked on
 * every reply. Nothing is sent to a socket another user could have placed (client/trust.ts).
 */
export async function request<T extends z.ZodMiniType>(options: RequestOptions, schema: SchemaSource<T>): Promise<z.output<T>>;
export async function request<T>(options: RequestOptions, shape: Shape<T>): Promise<T>;
export async function request(options: RequestOptions, answer: SchemaSource<z.ZodMiniType> | Shape<unknown>): Promise<unknown> {
  let loading: Promise<z.ZodMiniType> | undefined;
  const expected = (source: SchemaSource<z.ZodMiniType>): Promise<z.ZodMiniType> => (loading ??= source instanceof Function ? source() : Promise.resolve(source));
  const { socketPath, method, route } = options;
  await assertTrustedSocket(socketPath);
  const timeoutMs = options.timeoutMs ?? REQUEST_TIMEOUT_MS;
  const idempotent = method === 'GET' || options.idempotent === true;
  // Set from the write's callback: whether the daemon may have read the request.
  const progress = { sent: false };
  let reply: Reply;
  try {
    reply = await exchange({
      socketPath,
      method,
      path: route,
      headers: {
        [PROTOCOL_HEADER]: String(PROTOCOL_VERSION),
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      timeoutMs,
      keepAlive: options.closeConnection !== true,
      idempotent,
      onSent: () => {
        progress.sent = true;
        // While the daemon works: the shape's checker compiled, or the schema loaded (awaited once
        // the answer is in; a request that fails first must not leave it unhandled).
        if (isShape(answer)) primeShape(answer);
        else expected(answer).catch(() => undefined);
        options.whileWaiting?.();
      },
    });
  } catch (error) {
    if (error instanceof ExchangeTimeout) throw new SandboxdError('DAEMON_TIMEOUT', `the daemon did not answer ${method} ${route} within ${timeoutMs} ms`);
    if (error instanceof MalformedReply) throw new SandboxdError('INVALID_RESPONSE', `the daemon's answer to ${method} ${route} is not HTTP: ${error.message}`);
    if (progress.sent && !idempotent) {
      const lost = new SandboxdError('DAEMON_NOT_RUNNING', `the daemon on ${socketPath} closed the connection before answering ${method} ${route}`, { cause: error });
      unanswered.add(lost);
      throw lost;
    }
    if (unreachable(error)) throw new SandboxdError('DAEMON_NOT_RUNNING', `no daemon is listening on ${socketPath}`, { cause: error });
    throw new SandboxdError('DAEMON_NOT_RUNNING', `cannot reach the daemon on ${socketPath}: ${(error as Error).message}`, { cause: error });
  }
  const protocol = reply.headers.get(PROTOCOL_HEADER);
  const response = { status: reply.status, protocol, text: reply.body.toString('utf8') };

  if (options.anyProtocol !== true && response.protocol !== String(PROTOCOL_VERSION)) {
    throw new SandboxdError(
      'PROTOCOL_MISMATCH',
      `the daemon speaks protocol ${response.protocol ?? 'unknown'}, this client speaks ${PROTOCOL_VERSION}`,
    );
  }
  const json = parseJson(response.text);
  if (response.status >= 400) {
    const { ErrorBody } = await import('../shared/contracts/errors.js');
    const error = ErrorBody.safeParse(json, ONE_SHOT);
    if (error.success) throw SandboxdError.fromObject(error.data.error);
    throw new SandboxdError('INVALID_RESPONSE', `the daemon answered ${response.status} without an error body`);
  }
  const parsed = isShape(answer) ? checkShape(answer, json) : (await expected(answer)).safeParse(json, ONE_SHOT);
  if (!parsed.success) {
    throw new SandboxdError('INVALID_RESPONSE', `the daemon's answer to ${method} ${route} does not match this client's protocol: ${contractBreak(parsed.error.issues[0])}`);
  }
  return parsed.data;
}
