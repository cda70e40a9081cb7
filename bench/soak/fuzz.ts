import http from 'node:http';
import net from 'node:net';
import { PROTOCOL_HEADER, PROTOCOL_VERSION } from '../../shared/protocol.js';

const REQUEST_TIMEOUT_MS = 15_000;

export interface FuzzResult {
  requests: number;
  /** Status codes seen (`timeout` for none within the bound). */
  statuses: Map<string, number>;
  /** Answers that were neither a 4xx nor a timeout. */
  unexpected: string[];
}

/** Values that try every trick on a path-like field. */
function hostilePaths(canary: string): string[] {
  return [
    `${canary}/../../etc/passwd`,
    `${canary}/x\0/etc`,
    `${canary}/new\nline`,
    `${canary}/a:b:/etc:rw`,
    'relative/path',
    '',
    `/${'a'.repeat(5000)}`,
    `${canary}/../${canary}/./x`,
    '/proc/self/root/etc',
    `${canary}\r\nX-Injected: 1`,
  ];
}

interface HostileBody {
  body: unknown;
  /** Valid though hostile (an existing path, a HOME that is only a target): may be accepted, then released. */
  mayAccept: boolean;
}

// eslint-disable-next-line no-control-regex -- control characters are what makes a value invalid
const CONTROL = /[\u0000-\u001f\u007f]/;

/** Acquire bodies built from each hostile value; most break the contract in one way. */
function hostileBodies(canary: string): HostileBody[] {
  const client = { pid: process.pid, cwd: canary };
  const bodies: HostileBody[] = [];
  for (const value of hostilePaths(canary)) {
    const wellFormed = value.startsWith('/') && !CONTROL.test(value) && value.length <= 4096;
    bodies.push({ body: { engine: 'podman', client: { ...client, cwd: value } }, mayAccept: wellFormed });
    bodies.push({ body: { engine: 'podman', client, mounts: [value.includes(':') ? value : `${value}:/x:rw`] }, mayAccept: wellFormed && !value.split('/').includes('..') });
    bodies.push({ body: { engine: 'podman', client, containerUser: { uid: 1000, gid: 1000, home: value } }, mayAccept: wellFormed });
    bodies.push({ body: { engine: 'podman', client: { ...client, env: { CONTAINERS_CONF: `${value}\0` } } }, mayAccept: false });
    bodies.push({ body: { engine: 'podman', client, sockets: [{ name: '../x', hostPath: value }] }, mayAccept: false });
    bodies.push({ body: { engine: 'podman', client, passEnv: { [`BAD${value}`]: 'x' } }, mayAccept: value === '' });
  }
  let deep: unknown = {};
  for (let i = 0; i < 2000; i += 1) deep = { a: deep };
  for (const body of [
    { engine: 'podman', client, unknownField: true },
    { engine: 'nerdctl', client },
    { engine: 'podman', client: { ...client, pid: -1 } },
    { engine: 'podman', client, mounts: Array.from({ length: 1000 }, () => '/x') },
    { engine: 'podman', client, deep },
  ]) {
    bodies.push({ body, mayAccept: false });
  }
  return bodies;
}

function send(socketPath: string, method: string, route: string, body: string | null, contentType = 'application/json'): Promise<{ status: string; text: string }> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        socketPath,
        method,
        path: route,
        agent: false,
        timeout: REQUEST_TIMEOUT_MS,
        headers: { [PROTOCOL_HEADER]: String(PROTOCOL_VERSION), ...(body === null ? {} : { 'content-type': contentType, 'content-length': Buffer.byteLength(body) }) },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () => {
          resolve({ status: String(res.statusCode ?? 0), text });
        });
      },
    );
    req.on('timeout', () => {
      req.destroy();
      resolve({ status: 'timeout', text: '' });
    });
    req.on('error', (error: NodeJS.ErrnoException) => {
      resolve({ status: `error:${error.code ?? error.message}`, text: '' });
    });
    req.end(body ?? undefined);
  });
}

/** Raw bytes, for what node:http will not send: broken request lines, slow headers. */
function raw(socketPath: string, bytes: string, holdMs = 0): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    let text = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('timeout');
    }, REQUEST_TIMEOUT_MS + holdMs);
    socket.on('connect', () => {
      if (holdMs === 0) socket.write(bytes);
      else {
        // Slow-loris: one byte at a time, never finishing the headers.
        let at = 0;
        const drip = setInterval(() => {
          if (at < bytes.length && !socket.destroyed) socket.write(bytes.charAt(at++));
        }, 200);
        socket.once('close', () => { clearInterval(drip); });
      }
    });
    socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(text === '' ? 'closed' : (text.split(' ')[1] ?? 'garbled'));
    });
  });
}

/**
 * Thousands of malformed and hostile requests (DESIGN §9: inputs from the socket are untrusted).
 * Every one must get a 4xx (or, for a stalled sender, a timeout); `alive` is asked between
 * rounds and must keep answering.
 */
export async function fuzz(socketPath: string, canary: string, rounds: number, alive: () => Promise<boolean>): Promise<FuzzResult> {
  const result: FuzzResult = { requests: 0, statuses: new Map(), unexpected: [] };
  const note = (what: string, status: string, mayAccept = false): void => {
    result.requests += 1;
    result.statuses.set(status, (result.statuses.get(status) ?? 0) + 1);
    const ok = /^4\d\d$/.test(status) || status === 'timeout' || status === 'closed' || (mayAccept && status === '201');
    if (!ok) result.unexpected.push(`${what}: ${status}`);
  };
  /** An accepted hostile acquire is released at once, so nothing it holds outlives the fuzz. */
  const release = async (answer: { status: string; text: string }): Promise<string> => {
    if (answer.status === '201') {
      const id = (JSON.parse(answer.text) as { session: { id: string } }).session.id;
      await send(socketPath, 'DELETE', `/v1/sessions/${id}`, null);
    }
    return answer.status;
  };
  const bodies = hostileBodies(canary);
  for (let round = 0; round < rounds; round += 1) {
    const batch: Promise<void>[] = [];
    for (const [index, { body, mayAccept }] of bodies.entries()) {
      batch.push(
        send(socketPath, 'POST', '/v1/sessions', JSON.stringify(body))
          .then(release)
          .then((status) => {
            note(`acquire body #${String(index)}`, status, mayAccept);
          }),
      );
    }
    const plain = (what: string, answer: Promise<{ status: string }>): Promise<void> =>
      answer.then(({ status }) => {
        note(what, status);
      });
    for (const route of ['/v1/sessions/..%2F..%2Fetc', '/v1/sessions/ses_%00', `/v1/tunnels/${'x'.repeat(3000)}/restart`, '/v1/../../etc/passwd']) {
      batch.push(plain(`DELETE ${route.slice(0, 40)}`, send(socketPath, 'DELETE', route, null)));
    }
    batch.push(plain('200 KB body', send(socketPath, 'POST', '/v1/sessions', 'x'.repeat(200_000))));
    batch.push(plain('cut JSON', send(socketPath, 'POST', '/v1/sessions', '{"engine":')));
    batch.push(plain('text body', send(socketPath, 'POST', '/v1/sessions', 'engine=podman', 'text/plain')));
    batch.push(raw(socketPath, 'NOT HTTP AT ALL\r\n\r\n').then((status) => { note('bad request line', status); }));
    batch.push(raw(socketPath, `GET /v1/status HTTP/1.1\r\nhost: x\r\nx: ${'a'.repeat(70_000)}\r\n\r\n`).then((status) => { note('huge header', status); }));
    await Promise.all(batch);
    if (!(await alive())) result.unexpected.push(`the daemon stopped answering status after round ${String(round)}`);
  }
  return result;
}

/** Hundreds of idle connections and a few slow-loris senders; status must answer meanwhile. */
export async function holdConnections(socketPath: string, idle: number, slow: number, alive: () => Promise<boolean>): Promise<{ answeredMeanwhile: boolean; slowStatuses: string[] }> {
  const sockets: net.Socket[] = [];
  for (let i = 0; i < idle; i += 1) {
    const socket = net.connect(socketPath);
    socket.on('error', () => undefined);
    sockets.push(socket);
  }
  const slowRequests = Array.from({ length: slow }, () => raw(socketPath, 'GET /v1/status HTTP/1.1\r\nhost: x\r\nx-slow: ' + 'a'.repeat(500), 1));
  await new Promise((resolve) => setTimeout(resolve, 500));
  const answeredMeanwhile = await alive();
  const slowStatuses = await Promise.all(slowRequests);
  for (const socket of sockets) socket.destroy();
  return { answeredMeanwhile, slowStatuses };
}
