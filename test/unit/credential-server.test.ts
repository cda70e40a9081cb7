import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamGate } from '../../daemon/bridges/bounds.js';
import { SessionEndpoint } from '../../daemon/bridges/session-endpoint.js';
import type { CredentialQuery } from '../../daemon/credentials/credential-request.js';
import { CREDENTIAL_BURST, CREDENTIAL_PER_MINUTE, CredentialServer } from '../../daemon/credentials/credential-server.js';
import type { FillContext, FillResult } from '../../daemon/credentials/host-fill.js';

const TOKEN = 'tok-secret-value';
const FILL: FillContext = { hostHome: '/home/me', path: '/usr/bin' };

const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A real server on a real socket, with the host's git stood in for by `fill` and a clock the test moves. */
async function setup(fill: (query: CredentialQuery) => FillResult = () => ({ ok: true, answer: { username: 'me', password: TOKEN } })) {
  const dir = mkdtempSync('/tmp/sbx-cred-');
  closers.push(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  let now = 0;
  const queries: CredentialQuery[] = [];
  const server = new CredentialServer({
    socketPath: path.join(dir, 'server.sock'),
    fill: (_context, query) => {
      queries.push(query);
      return Promise.resolve(fill(query));
    },
    monotonic: () => now,
    logger,
  });
  await server.listen();
  closers.push(() => server.close());
  /** A session's own socket, as the relay makes it: it names itself to the server first. */
  async function endpoint(name: string): Promise<SessionEndpoint> {
    const made = new SessionEndpoint({
      socketPath: path.join(dir, `${name}.sock`),
      upstream: server.socketPath,
      gate: new UpstreamGate(),
      monotonic: () => now,
      umask: 0o177,
      logger,
      onUpstreamError: () => undefined,
      announce: true,
    });
    await made.listen();
    closers.push(() => made.close());
    return made;
  }
  return { dir, server, endpoint, lines, queries, advance: (ms: number) => (now += ms) };
}

/** What git's credential-cache helper does: write the request, close its writing side, read the answer to the end. */
function ask(socket: string, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const client = net.connect({ path: socket, allowHalfOpen: true });
    let answer = '';
    client.on('data', (chunk: Buffer) => (answer += chunk.toString('utf8')));
    client.on('end', () => {
      resolve(answer);
    });
    client.on('error', reject);
    client.end(text);
  });
}

const GET = 'action=get\ntimeout=900\nprotocol=https\nhost=github.com\n';

describe('the daemon\'s credential server, behind a session\'s own socket', () => {
  it('answers a get for a host its session named through that session\'s socket, and logs host and username, never the secret', async () => {
    const { server, endpoint, lines, queries } = await setup();
    const mine = await endpoint('mine');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    expect(await ask(mine.socketPath, GET)).toBe(`username=me\npassword=${TOKEN}\n`);
    expect(queries).toEqual([{ protocol: 'https', host: 'github.com' }]);
    expect(lines).toContainEqual(expect.objectContaining({ sessionId: 'ses_mine01', host: 'github.com', username: 'me', outcome: 'answered' }));
    expect(JSON.stringify(lines)).not.toContain(TOKEN);
  });

  it('a session\'s socket asks only for its own hosts: another session\'s host, or a socket no session holds, gets nothing', async () => {
    const { server, endpoint, queries } = await setup();
    const mine = await endpoint('mine');
    const other = await endpoint('other');
    const gone = await endpoint('gone');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    server.register(other.socketPath, { sessionId: 'ses_other1', hosts: ['gitlab.com'], fill: FILL });
    const unregister = server.register(gone.socketPath, { sessionId: 'ses_gone01', hosts: ['github.com'], fill: FILL });
    unregister();
    expect(await ask(other.socketPath, GET)).toBe('');
    expect(await ask(gone.socketPath, GET)).toBe('');
    // What the container writes comes after its socket's own line: naming another socket changes nothing.
    expect(await ask(other.socketPath, `${mine.socketPath}\n${GET}`)).toBe('');
    expect(queries).toEqual([]);
  });

  it('a previous daemon\'s session answers on its kept socket as that session, logged as kept; the renewal\'s registration then owns the socket', async () => {
    const { server, endpoint, lines, queries } = await setup();
    const kept = await endpoint('kept');
    const silence = server.register(kept.socketPath, { sessionId: 'ses_before1', hosts: ['github.com'], fill: FILL, kept: true });
    expect(await ask(kept.socketPath, GET)).toBe(`username=me\npassword=${TOKEN}\n`);
    expect(await ask(kept.socketPath, GET.replace('github.com', 'gitlab.com'))).toBe('');
    expect(lines).toContainEqual(expect.objectContaining({ sessionId: 'ses_before1', kept: true, host: 'github.com', outcome: 'answered' }));
    expect(lines).toContainEqual(expect.objectContaining({ sessionId: 'ses_before1', kept: true, outcome: 'refused' }));
    // The renewed session registers the same socket; the kept registration's end, coming after, leaves it alone.
    server.register(kept.socketPath, { sessionId: 'ses_after01', hosts: ['github.com'], fill: FILL });
    silence();
    expect(await ask(kept.socketPath, GET)).toBe(`username=me\npassword=${TOKEN}\n`);
    expect(lines.at(-1)).toMatchObject({ sessionId: 'ses_after01', outcome: 'answered' });
    expect(lines.at(-1)).not.toHaveProperty('kept');
    expect(queries).toHaveLength(2);
  });

  it('drops store and erase unread: the host\'s helpers never hear of them', async () => {
    const { server, endpoint, queries, lines } = await setup();
    const mine = await endpoint('mine');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    expect(await ask(mine.socketPath, 'action=store\ntimeout=900\nprotocol=https\nhost=github.com\nusername=me\npassword=planted\n')).toBe('');
    expect(await ask(mine.socketPath, 'action=erase\ntimeout=900\nprotocol=https\nhost=github.com\n')).toBe('');
    expect(queries).toEqual([]);
    expect(JSON.stringify(lines)).not.toContain('planted');
  });

  it('refuses a request longer than its bound', async () => {
    const { server, endpoint, queries } = await setup();
    const mine = await endpoint('mine');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    expect(await ask(mine.socketPath, `${GET}path=${'x'.repeat(8192)}\n`)).toBe('');
    expect(queries).toEqual([]);
  });

  it(`answers ${String(CREDENTIAL_BURST)} at once, then ${String(CREDENTIAL_PER_MINUTE)} a minute; the refusals are logged`, async () => {
    const { server, endpoint, queries, lines, advance } = await setup();
    const mine = await endpoint('mine');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    // One after another: the session socket's own bound on connections at once is not what is tested.
    const burst: string[] = [];
    for (let i = 0; i < CREDENTIAL_BURST + 1; i += 1) burst.push(await ask(mine.socketPath, GET));
    expect(burst.filter((answer) => answer !== '')).toHaveLength(CREDENTIAL_BURST);
    expect(burst.at(-1)).toBe('');
    expect(await ask(mine.socketPath, GET)).toBe('');
    advance(60_000 / CREDENTIAL_PER_MINUTE);
    expect(await ask(mine.socketPath, GET)).not.toBe('');
    expect(await ask(mine.socketPath, GET)).toBe('');
    expect(queries).toHaveLength(CREDENTIAL_BURST + 1);
    expect(lines.filter((line) => line.outcome === 'refused' && line.sessionId === 'ses_mine01')).toHaveLength(3);
  });

  it('a host git that cannot answer (a helper that wanted to prompt) gives the sandbox nothing, and the log says why', async () => {
    const { server, endpoint, lines } = await setup(() => ({ ok: false, reason: "the host's git credential fill failed: fatal: could not read Username: terminal prompts disabled" }));
    const mine = await endpoint('mine');
    server.register(mine.socketPath, { sessionId: 'ses_mine01', hosts: ['github.com'], fill: FILL });
    expect(await ask(mine.socketPath, `${GET}username=me\n`)).toBe('');
    expect(lines).toContainEqual(expect.objectContaining({ sessionId: 'ses_mine01', host: 'github.com', username: 'me', outcome: 'failed' }));
  });
});
