import { SandboxdError } from '../../shared/errors.js';

/** What the VM found at a path: a directory, another file, or nothing. */
export type PathKind = 'd' | 'f' | '-';

/** A query must be answered within this; a VM that does not answer is asked another way. */
export const QUERY_TIMEOUT_MS = 5_000;

interface Pending {
  /** What was asked about, for errors. */
  subject: string;
  /** The answer's words after the id. */
  resolve(answer: string): void;
  reject(error: SandboxdError): void;
}

/** The commands of the tunnel's script on a session's directory (ssh-command.ts). */
export type SlotVerb = 'm' | 'p' | 'r';

function isKind(value: string): value is PathKind {
  return value === 'd' || value === 'f' || value === '-';
}

/**
 * The line protocol the remote script speaks on the tunnel's stdin/stdout: `s <id> <path>` in,
 * `sandboxd-seen <id> d|f|-` out, and the commands on sessions' directories. Paths reach it only
 * after the mount checks refused control characters, so one line is one path.
 */
export class VmQueries {
  private next = 0;
  private readonly pending = new Map<string, Pending>();
  private closed: SandboxdError | null = null;

  constructor(
    private readonly write: (text: string) => void,
    private readonly timeoutMs = QUERY_TIMEOUT_MS,
  ) {}

  async ask(paths: readonly string[]): Promise<Map<string, PathKind>> {
    const kinds = await Promise.all(paths.map((one) => this.askOne(one)));
    return new Map(paths.map((one, index) => [one, kinds[index] ?? '-']));
  }

  /** Makes (`m`), publishes (`p`) or removes (`r`) a session's directory; true when the VM did. */
  async slot(verb: SlotVerb, name: string): Promise<boolean> {
    return (await this.send(verb, `the session directory ${name}`, ` ${name}`)) === 'd';
  }

  /** The session directories whose socket is not the one published there. */
  async replaced(): Promise<string[]> {
    return (await this.send('V', 'the session sockets')).split(' ').filter((name) => name !== '');
  }

  /** `rest` is what follows the id on the answer's line. */
  answer(id: string, rest: string): void {
    const waiting = this.pending.get(id);
    if (waiting === undefined) return;
    this.pending.delete(id);
    waiting.resolve(rest);
  }

  /** Fails every open query: the connection they were sent on is gone. */
  close(error: SandboxdError): void {
    this.closed = error;
    for (const waiting of this.pending.values()) waiting.reject(error);
    this.pending.clear();
  }

  private async askOne(path: string): Promise<PathKind> {
    // eslint-disable-next-line no-control-regex -- a newline would split the query
    if (/[\u0000-\u001f]/.test(path)) throw new SandboxdError('UNSUPPORTED_PATH', `cannot ask the VM about ${JSON.stringify(path)}`);
    const kind = await this.send('s', path, ` ${path}`);
    if (!isKind(kind)) throw new SandboxdError('TUNNEL_FAILED', `the VM answered "${kind}" about ${path}`);
    return kind;
  }

  /** `subject` names what is asked about in errors; `rest` follows the id on the query line. */
  private send(verb: 's' | SlotVerb | 'V', subject: string, rest = ''): Promise<string> {
    if (this.closed !== null) return Promise.reject(this.closed);
    this.next += 1;
    const id = String(this.next);
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SandboxdError('TUNNEL_FAILED', `the VM did not say within ${this.timeoutMs} ms about ${subject}`));
      }, this.timeoutMs);
      timer.unref();
      this.pending.set(id, {
        subject,
        resolve: (answer) => {
          clearTimeout(timer);
          resolve(answer);
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
