/**
 * What the library would ship without client/http1.ts, for the transport rows: `node:http` with a
 * kept-alive agent over the socket, the body read whole, the exchange bounded by one timer.
 */
import http from 'node:http';
import { runGets } from './transport-gets.js';

const agent = new http.Agent({ keepAlive: true, maxFreeSockets: 2 });

await runGets(
  ({ socketPath, path, headers, timeoutMs }) =>
    new Promise<Buffer>((resolve, reject) => {
      const request = http.request({ socketPath, path, method: 'GET', headers, agent }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk)).once('error', reject).once('end', () => {
          clearTimeout(timer);
          if (response.statusCode === 200) resolve(Buffer.concat(chunks));
          else reject(new Error(`the daemon answered ${String(response.statusCode)}`));
        });
      });
      const timer = setTimeout(() => request.destroy(new Error(`no answer within ${String(timeoutMs)} ms`)), timeoutMs);
      request.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      request.end();
    }),
);
