/** The hand-written client the library ships (client/http1.ts), for the transport rows. */
import { exchange } from '../client/http1.js';
import { runGets } from './transport-gets.js';

await runGets(async ({ socketPath, path, headers, timeoutMs }) => {
  const reply = await exchange({ socketPath, method: 'GET', path, headers, timeoutMs });
  if (reply.status !== 200) throw new Error(`the daemon answered ${String(reply.status)}`);
  return reply.body;
});
