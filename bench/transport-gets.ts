import { API_PREFIX, PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';

/** One `GET /v1/status`: the body of a 200 answer, read whole; anything else rejects. */
export type Get = (request: { socketPath: string; path: string; headers: Record<string, string>; timeoutMs: number }) => Promise<Buffer>;

/**
 * The program each transport's bundle runs: `gets` requests in a row on the daemon's socket, over
 * the one connection the transport keeps, each answer parsed as a client would. With one, only
 * the process's exit says it was answered (the cold rows time the whole process); with more, the
 * first opens the connection and each of the others is timed, printed as a JSON array of ms.
 */
export async function runGets(get: Get): Promise<void> {
  const [socketPath = '', count = '1'] = process.argv.slice(3);
  const request = { socketPath, path: `${API_PREFIX}/status`, headers: { [PROTOCOL_HEADER]: String(PROTOCOL_VERSION) }, timeoutMs: 10_000 };
  const ask = async (): Promise<unknown> => JSON.parse((await get(request)).toString('utf8'));
  await ask();
  const times: number[] = [];
  for (let run = 1; run < Number(count); run += 1) {
    const start = performance.now();
    await ask();
    times.push(performance.now() - start);
  }
  if (times.length > 0) process.stdout.write(`${JSON.stringify(times)}\n`);
}
