/*
 * One credential request from a sandbox, read as git's credential protocol writes it (git-credential(1):
 * `key=value` lines) in the framing of git's own `credential-cache` helper, which the sandbox's git
 * runs against the session's socket: `action=<get|store|erase>`, `timeout=<s>`, then the credential.
 * Pure: what is accepted, what git on the host is asked and what goes back is decided here.
 */
import { normalizeCredentialHost } from '../../shared/git-credential-hosts.js';

/** More than any credential git sends (protocol, host, username, path, a few capabilities). */
export const MAX_REQUEST_BYTES = 4096;

/** What the host's git is asked: the origin, and the username and path when git named them. */
export interface CredentialQuery {
  protocol: 'https';
  /** Normalised as the session's hosts are (lower case, no :443). */
  host: string;
  username?: string;
  path?: string;
}

export type ParsedRequest = { ok: true; query: CredentialQuery } | { ok: false; reason: string };

/** Keys whose second value would make the request mean two things: git keeps the last, a helper may keep the first. */
const SINGLE_KEYS = new Set(['action', 'protocol', 'host', 'username', 'path', 'password', 'url']);

/**
 * The `key=value` lines up to the first empty line, as git reads them, or why they are refused:
 * NUL or CR anywhere (git would read a different value than a helper does), a line without `=`,
 * or a key that matters given twice.
 */
export function parseCredentialLines(text: string): { ok: true; fields: Map<string, string> } | { ok: false; reason: string } {
  if (text.includes('\0')) return { ok: false, reason: 'the request holds a NUL byte' };
  if (text.includes('\r')) return { ok: false, reason: 'the request holds a carriage return' };
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') break;
    const equals = line.indexOf('=');
    if (equals <= 0) return { ok: false, reason: 'a line of the request is not key=value' };
    const key = line.slice(0, equals);
    if (SINGLE_KEYS.has(key) && fields.has(key)) return { ok: false, reason: `the request names ${key} twice` };
    fields.set(key, line.slice(equals + 1));
  }
  return { ok: true, fields };
}

/**
 * A `get` for one of `allowed` (normalised hosts), or why not: only `action=get`, only
 * `protocol=https`, and the host exactly one the session may ask for (after the same
 * normalisation, never a prefix or suffix). A `url=` key is refused rather than parsed: git sends
 * protocol and host, and a second way of naming the origin could disagree with them.
 */
export function parseRequest(text: string, allowed: ReadonlySet<string>): ParsedRequest {
  const parsed = parseCredentialLines(text);
  if (!parsed.ok) return parsed;
  const { fields } = parsed;
  const action = fields.get('action');
  if (action !== 'get') return { ok: false, reason: `action ${action === undefined ? '(none)' : JSON.stringify(action.slice(0, 20))} is not get` };
  if (fields.has('url')) return { ok: false, reason: 'the request names a url; only protocol and host are accepted' };
  const protocol = fields.get('protocol');
  if (protocol !== 'https') return { ok: false, reason: `protocol ${protocol === undefined ? '(none)' : JSON.stringify(protocol.slice(0, 20))} is not https` };
  const rawHost = fields.get('host') ?? '';
  const normal = normalizeCredentialHost(rawHost);
  if ('error' in normal) return { ok: false, reason: `host ${JSON.stringify(rawHost.slice(0, 80))} ${normal.error}` };
  if (!allowed.has(normal.host)) return { ok: false, reason: `host ${normal.host} is not one this session may ask for` };
  const query: CredentialQuery = { protocol: 'https', host: normal.host };
  const username = fields.get('username');
  const urlPath = fields.get('path');
  if (username !== undefined && username !== '') query.username = username;
  if (urlPath !== undefined && urlPath !== '') query.path = urlPath;
  return { ok: true, query };
}

/** What `git credential fill` on the host reads: only what was checked, then the blank line that ends it. */
export function fillInput(query: CredentialQuery): string {
  const lines = [`protocol=${query.protocol}`, `host=${query.host}`];
  if (query.username !== undefined) lines.push(`username=${query.username}`);
  if (query.path !== undefined) lines.push(`path=${query.path}`);
  return `${lines.join('\n')}\n\n`;
}

/** What goes back to the sandbox: the username and password, and the expiry when the helper gave one. */
export interface CredentialAnswer {
  username: string;
  password: string;
  passwordExpiryUtc?: string;
}

/** `git credential fill`'s output, reduced to an answer; null when it holds no username and password. */
export function parseFillOutput(output: string): CredentialAnswer | null {
  const parsed = parseCredentialLines(output.endsWith('\n') ? output : `${output}\n`);
  if (!parsed.ok) return null;
  const username = parsed.fields.get('username');
  const password = parsed.fields.get('password');
  if (username === undefined || password === undefined || password === '') return null;
  const expiry = parsed.fields.get('password_expiry_utc');
  return { username, password, ...(expiry === undefined || !/^[0-9]{1,20}$/.test(expiry) ? {} : { passwordExpiryUtc: expiry }) };
}

export function renderAnswer(answer: CredentialAnswer): string {
  const lines = [`username=${answer.username}`, `password=${answer.password}`];
  if (answer.passwordExpiryUtc !== undefined) lines.push(`password_expiry_utc=${answer.passwordExpiryUtc}`);
  return `${lines.join('\n')}\n`;
}
