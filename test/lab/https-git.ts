import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

export interface HttpsGit {
  port: number;
  /** `127.0.0.1:<port>`: what git names the host in a credential request. */
  host: string;
  /** The certificate the server presents, self-signed: the user's git trusts it by http.sslCAInfo. */
  caFile: string;
  /** `https://127.0.0.1:<port>/<name>.git` */
  url(name: string): string;
  /** Bare repositories served, each under this directory. */
  root: string;
  /** How many requests came with the right Authorization, and with a wrong one. */
  counts: { authorized: number; refused: number };
  close(): Promise<void>;
}

/** A self-signed certificate for 127.0.0.1, made with openssl in `dir`. */
function makeCertificate(dir: string): { key: string; cert: string } {
  const key = path.join(dir, 'server.key');
  const cert = path.join(dir, 'server.crt');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'basicConstraints=critical,CA:TRUE'], { stdio: 'ignore' });
  return { key, cert };
}

/** Splits a CGI answer into its status, headers and body. */
function parseCgi(output: Buffer): { status: number; headers: [string, string][]; body: Buffer } {
  let end = output.indexOf('\r\n\r\n');
  let skip = 4;
  if (end === -1) {
    end = output.indexOf('\n\n');
    skip = 2;
  }
  const head = output.subarray(0, end === -1 ? output.length : end).toString('latin1');
  const headers: [string, string][] = [];
  let status = 200;
  for (const line of head.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim();
    const value = line.slice(colon + 1).trim();
    if (name.toLowerCase() === 'status') status = Number(value.split(' ')[0]);
    else headers.push([name, value]);
  }
  return { status, headers, body: end === -1 ? Buffer.alloc(0) : output.subarray(end + skip) };
}

/**
 * git's own `git http-backend` behind Node's https on loopback with basic auth (`user`:`token`),
 * so pushes and fetches are real smart-HTTP git: GIT_PROJECT_ROOT, GIT_HTTP_EXPORT_ALL and
 * REMOTE_USER (which enables receive-pack) as a web server's CGI would set them.
 */
export async function startHttpsGit(dir: string, user: string, token: string): Promise<HttpsGit> {
  mkdirSync(dir, { recursive: true });
  const root = path.join(dir, 'repos');
  mkdirSync(root, { recursive: true });
  const { key, cert } = makeCertificate(dir);
  const expected = `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`;
  const counts = { authorized: 0, refused: 0 };
  const server = https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (request, response) => {
    if (request.headers.authorization !== expected) {
      if (request.headers.authorization !== undefined) counts.refused += 1;
      response.writeHead(401, { 'WWW-Authenticate': 'Basic realm="lab"' });
      response.end();
      return;
    }
    counts.authorized += 1;
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      const url = new URL(request.url ?? '/', 'https://127.0.0.1');
      const cgi = spawn('git', ['http-backend'], {
        env: {
          PATH: process.env.PATH ?? '',
          GIT_PROJECT_ROOT: root,
          GIT_HTTP_EXPORT_ALL: '1',
          REMOTE_USER: user,
          REQUEST_METHOD: request.method ?? 'GET',
          PATH_INFO: decodeURIComponent(url.pathname),
          QUERY_STRING: url.search.replace(/^\?/, ''),
          CONTENT_TYPE: request.headers['content-type'] ?? '',
          CONTENT_LENGTH: String(body.length),
          ...(request.headers['content-encoding'] === undefined ? {} : { HTTP_CONTENT_ENCODING: request.headers['content-encoding'] }),
          ...(typeof request.headers['git-protocol'] === 'string' ? { GIT_PROTOCOL: request.headers['git-protocol'] } : {}),
        },
        stdio: ['pipe', 'pipe', 'ignore'],
      });
      const out: Buffer[] = [];
      cgi.stdout.on('data', (chunk: Buffer) => out.push(chunk));
      cgi.stdin.on('error', () => undefined);
      cgi.stdin.end(body);
      cgi.on('close', () => {
        const answer = parseCgi(Buffer.concat(out));
        response.writeHead(answer.status, answer.headers);
        response.end(answer.body);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    port,
    host: `127.0.0.1:${String(port)}`,
    caFile: cert,
    url: (name) => `https://127.0.0.1:${String(port)}/${name}.git`,
    root,
    counts,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}
