import { SandboxdError } from '../../shared/errors.js';

/** What the VM found at a path: a directory, another file, or nothing. */
export type PathKind = 'd' | 'f' | '-';

/** A query must be answered within this; a VM that does not answer is asked another way. */
export const QUERY_TIMEOUT_MS = 5_000;

interface Pending {
  /** What was asked about, for errors. */
  subject: string;
  resolve(kind: PathKind): void;
  reject(error: SandboxdError): void;
}

function isKind(value: string): value is PathKind {
  return value === 'd' || value === 'f' || value === '-';
}

/**
 * The line protocol the remote script speaks on the tunnel's stdin/stdout: `s <id> <path>` in,
 * `sandboxd-seen <id> d|f|-` out. Paths reach it only after the mount checks refused control
 * characters, so one line is one path.
 */
export class VmQueries {
  private next = 0;
  private readonly pending = new Map<string, Pending>();
  private closed: SandboxdError | null = null;

  constructor(
    private readonly write: (text: string) => void,
    private readonly timeoutMs = QUERY_TIMEOUT_MS,
  ) {}

  /** Whether `agent.sock` still leads to the socket this generation published (`v <id>`). */
  async intact(): Promise<boolean> {
    return (await this.send('v', 'the tunnel\'s socket')) === 'd';
  }

  async ask(paths: readonly string[]): Promise<Map<string, PathKind>> {
    const kinds = await Promise.all(paths.map((one) => this.askOne(one)));
    return new Map(paths.map((one, index) => [one, kinds[index] ?? '-']));
  }

  answer(id: string, kind: string): void {
    const waiting = this.pending.get(id);
    if (waiting === undefined) return;
    this.pending.delete(id);
    if (isKind(kind)) waiting.resolve(kind);
    else waiting.reject(new SandboxdError('TUNNEL_FAILED', `the VM answered "${kind}" about ${waiting.subject}`));
  }

  /** Fails every open query: the connection they were sent on is gone. */
  close(error: SandboxdError): void {
    this.closed = error;
    for (const waiting of this.pending.values()) waiting.reject(error);
    this.pending.clear();
  }

  private askOne(path: string): Promise<PathKind> {
    // eslint-disable-next-line no-control-regex -- a newline would split the query
    if (/[\u0000-\u001f]/.test(path)) return Promise.reject(new SandboxdError('UNSUPPORTED_PATH', `cannot ask the VM about ${JSON.stringify(path)}`));
    return this.send('s', path, ` ${path}`);
  }

  /** `subject` names what is asked about in errors; `rest` follows the id on the query line. */
  private send(verb: 's' | 'v', subject: string, rest = ''): Promise<PathKind> {
    if (this.closed !== null) return Promise.reject(this.closed);
    this.next += 1;
    const id = String(this.next);
    return new Promise<PathKind>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SandboxdError('TUNNEL_FAILED', `the VM did not say within ${this.timeoutMs} ms about ${subject}`));
      }, this.timeoutMs);
      timer.unref();
      this.pending.set(id, {
        subject,
        resolve: (kind) => {
          clearTimeout(timer);
          resolve(kind);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.write(`${verb} ${id}${rest}\n`);
    });
  }
}
