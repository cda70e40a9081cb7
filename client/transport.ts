import http from 'node:http';
import type * as z from 'zod/mini';
import { SandboxdError } from '../shared/errors.js';
import { ErrorBody } from '../shared/contracts/errors.js';
import { ENGLISH } from '../shared/contracts/messages.js';
import { PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';
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
}

/**
 * One kept-alive connection pool for the process: heartbeats and repeated acquires skip a connect
 * each. Idle sockets are unref'd by node, so they never hold a process open; the trust check runs
 * before every request all the same.
 */
const KEEP_ALIVE = new http.Agent({ keepAlive: true, maxSockets: 8, maxFreeSockets: 2 });

/**
 * A client parses each answer once: zod's compiled fast path (a `new Function` per object
 * schema, built on first use) costs more than it saves, about 8 ms of every CLI call.
 */
const ONE_SHOT = { jitless: true, ...ENGLISH } as const;

const UNREACHABLE = new Set(['ENOENT', 'ECONNREFUSED', 'ENOTSOCK', 'ECONNRESET']);

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * One JSON request over the daemon's Unix socket, with the response checked against its shared
 * schema (STYLE 1) and the daemon's protocol version checked on every reply. Nothing is sent to a
 * socket another user could have placed (client/trust.ts).
 */
export async function request<T extends z.ZodMiniType>(options: RequestOptions, schema: T): Promise<z.output<T>> {
  const { socketPath, method, route } = options;
  await assertTrustedSocket(socketPath);
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const requestOptions: http.RequestOptions & { servername: string } = {
    socketPath,
    method,
    path: route,
    agent: KEEP_ALIVE,
    // Without it the agent asks net.isIP() of the host name for TLS, compiling node's IPv6
    // pattern on every start: 5 ms of a `sandboxd status` for a Unix socket that has no TLS.
    servername: '',
    headers: {
      [PROTOCOL_HEADER]: String(PROTOCOL_VERSION),
      ...(options.closeConnection === true ? { connection: 'close' } : {}),
      ...(payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }),
    },
    timeout: options.timeoutMs ?? REQUEST_TIMEOUT_MS,
  };
  const response = await new Promise<{ status: number; protocol: string | undefined; text: string }>((resolve, reject) => {
    const req = http.request(
      requestOptions,
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const protocol = res.headers[PROTOCOL_HEADER];
          resolve({ status: res.statusCode ?? 0, protocol: Array.isArray(protocol) ? protocol[0] : protocol, text: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => {
      req.destroy(new SandboxdError('DAEMON_TIMEOUT', `the daemon did not answer ${method} ${route} within ${options.timeoutMs ?? REQUEST_TIMEOUT_MS} ms`));
    });
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (error instanceof SandboxdError) reject(error);
      else if (error.code !== undefined && UNREACHABLE.has(error.code)) {
        reject(new SandboxdError('DAEMON_NOT_RUNNING', `no daemon is listening on ${socketPath}`, { cause: error }));
      } else reject(new SandboxdError('DAEMON_NOT_RUNNING', `cannot reach the daemon on ${socketPath}: ${error.message}`, { cause: error }));
    });
    req.end(payload);
  });

  if (options.anyProtocol !== true && response.protocol !== String(PROTOCOL_VERSION)) {
    throw new SandboxdError(
      'PROTOCOL_MISMATCH',
      `the daemon speaks protocol ${response.protocol ?? 'unknown'}, this client speaks ${PROTOCOL_VERSION}`,
    );
  }
  const json = parseJson(response.text);
  if (response.status >= 400) {
    const error = ErrorBody.safeParse(json, ONE_SHOT);
    if (error.success) throw SandboxdError.fromObject(error.data.error);
    throw new SandboxdError('INVALID_RESPONSE', `the daemon answered ${response.status} without an error body`);
  }
  const parsed = schema.safeParse(json, ONE_SHOT);
  if (!parsed.success) {
    throw new SandboxdError('INVALID_RESPONSE', `the daemon's answer to ${method} ${route} does not match the contract: ${parsed.error.issues[0]?.message ?? 'unknown'}`);
  }
  return parsed.data;
}
