import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { SandboxdError } from '../../shared/errors.js';
import type { ErrorBody } from '../../shared/contracts/errors.js';
import { PROTOCOL_HEADER, PROTOCOL_VERSION } from '../../shared/protocol.js';

/** What node's HTTP parser rejected, as one of our codes. */
export function parserFailure(error: Error & { code?: unknown }, requestTimeoutMs: number): SandboxdError {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new SandboxdError('HEADERS_TOO_LARGE', 'the request headers are larger than the daemon accepts');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new SandboxdError('REQUEST_TIMEOUT', `the request did not arrive within ${requestTimeoutMs} ms`);
    default:
      return new SandboxdError('BAD_REQUEST', `malformed HTTP request (${typeof error.code === 'string' ? error.code : 'parse error'})`);
  }
}

/** A whole HTTP/1.1 response in our error shape, for a socket fastify never got to see. */
export function rawErrorResponse(error: SandboxdError): string {
  const body = JSON.stringify({ error: error.toJSON() } satisfies ErrorBody);
  return [
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? 'Error'}`,
    'content-type: application/json; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`,
    `${PROTOCOL_HEADER}: ${PROTOCOL_VERSION}`,
    'connection: close',
    '',
    body,
  ].join('\r\n');
}

/**
 * The server's 'clientError' handler: the parser failed before any route ran (bad request line,
 * oversized headers, a request that never finished arriving). Answer in the error shape, close.
 */
export function clientErrorHandler(requestTimeoutMs: number): (error: Error & { code?: unknown }, socket: Duplex) => void {
  return (error, socket) => {
    // A reset peer is gone; a response already under way cannot be replaced by another one.
    const started = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    if (error.code === 'ECONNRESET' || socket.destroyed || !socket.writable || started) {
      socket.destroy();
      return;
    }
    socket.end(rawErrorResponse(parserFailure(error, requestTimeoutMs)), () => {
      socket.destroy();
    });
  };
}
