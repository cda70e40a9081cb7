import net from 'node:net';

/*
 * OpenSSH's multiplexing protocol (PROTOCOL.mux in openssh-portable), the part a tunnel needs:
 * asking a running ControlMaster to add and cancel remote forwards of Unix sockets. Speaking it
 * here, instead of running `ssh -O forward -R <vm path>:<host path>`, keeps every VM path off any
 * argv: `ps` on the host shows only the master's control path, which is in a private directory.
 */

const MUX_MSG_HELLO = 0x00000001;
const MUX_C_OPEN_FWD = 0x10000006;
const MUX_C_CLOSE_FWD = 0x10000007;
const MUX_S_OK = 0x80000001;
const MUX_S_PERMISSION_DENIED = 0x80000002;
const MUX_S_FAILURE = 0x80000003;
const MUX_S_REMOTE_PORT = 0x80000007;
const MUX_FWD_REMOTE = 2;
/** A port of (u_int)-2 makes the host field a Unix socket path. */
const PORT_STREAMLOCAL = 0xfffffffe;
const MUX_VERSION = 4;
/** The master answers at once, or after one round trip to sshd for a remote forward. */
export const MUX_TIMEOUT_MS = 10_000;
/** Larger frames are not the master's (its replies are a few words). */
const MAX_FRAME_BYTES = 256 * 1024;

/** What the master refused, in its own words (MUX_S_FAILURE / MUX_S_PERMISSION_DENIED). */
export class MuxRefusal extends Error {}

interface Pending {
  resolve(): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

function u32(value: number): Buffer {
  const buffer = Buffer.alloc(4);
  buffer.writeUInt32BE(value >>> 0);
  return buffer;
}

function text(value: string): Buffer {
  const bytes = Buffer.from(value, 'utf8');
  return Buffer.concat([u32(bytes.length), bytes]);
}

function frame(parts: readonly Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([u32(body.length), body]);
}

/** The forward's fields: a remote Unix socket at `listen` in the VM, whose connections go to `connect` here. */
function streamlocalForward(listen: string, connect: string): Buffer[] {
  return [u32(MUX_FWD_REMOTE), text(listen), u32(PORT_STREAMLOCAL), text(connect), u32(PORT_STREAMLOCAL)];
}

/**
 * One connection to a ControlMaster's control socket. Requests may be sent back to back; the
 * master answers them in order, each by its request id, and each is bounded by MUX_TIMEOUT_MS.
 */
export class MuxClient {
  private buffer = Buffer.alloc(0);
  private next = 1;
  private readonly pending = new Map<number, Pending>();
  private closedWith: Error | null = null;
  private hello: { resolve(): void; reject(error: Error): void } | null = null;

  private constructor(private readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.receive(chunk);
    });
    socket.on('error', (error) => {
      this.fail(error);
    });
    socket.on('close', () => {
      this.fail(new Error('the ssh control connection closed'));
    });
  }

  /** Connects and exchanges hellos; rejects when the master does not speak protocol 4 in time. */
  static connect(controlPath: string, timeoutMs = MUX_TIMEOUT_MS): Promise<MuxClient> {
    const client = new MuxClient(net.connect(controlPath));
    return new Promise<MuxClient>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.close();
        reject(new Error(`the ssh control socket did not say hello within ${String(timeoutMs)} ms`));
      }, timeoutMs);
      timer.unref();
      client.hello = {
        resolve: () => {
          clearTimeout(timer);
          resolve(client);
        },
        reject: (error) => {
          clearTimeout(timer);
          client.close();
          reject(error);
        },
      };
      client.socket.write(frame([u32(MUX_MSG_HELLO), u32(MUX_VERSION)]));
    });
  }

  get closed(): boolean {
    return this.closedWith !== null;
  }

  /** Has sshd listen at `listen` (a path in the VM) and bring each connection to `connect` here. */
  openRemoteForward(listen: string, connect: string): Promise<void> {
    return this.request(MUX_C_OPEN_FWD, streamlocalForward(listen, connect));
  }

  /** Cancels that forward: sshd stops listening (the socket file stays, as sshd leaves it). */
  closeRemoteForward(listen: string, connect: string): Promise<void> {
    return this.request(MUX_C_CLOSE_FWD, streamlocalForward(listen, connect));
  }

  close(): void {
    this.socket.destroy();
    this.fail(new Error('the ssh control connection was closed'));
  }

  private request(type: number, fields: readonly Buffer[]): Promise<void> {
    if (this.closedWith !== null) return Promise.reject(this.closedWith);
    const id = this.next;
    this.next = (this.next + 1) >>> 0 || 1;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`the ssh control socket did not answer within ${String(MUX_TIMEOUT_MS)} ms`));
      }, MUX_TIMEOUT_MS);
      timer.unref();
      this.pending.set(id, { resolve, reject, timer });
      this.socket.write(frame([u32(type), u32(id), ...fields]));
    });
  }

  private receive(chunk: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    while (this.buffer.length >= 4) {
      const length = this.buffer.readUInt32BE(0);
      if (length < 4 || length > MAX_FRAME_BYTES) {
        this.socket.destroy();
        this.fail(new Error(`the ssh control socket sent a frame of ${String(length)} bytes`));
        return;
      }
      if (this.buffer.length < 4 + length) return;
      const body = this.buffer.subarray(4, 4 + length);
      this.buffer = this.buffer.subarray(4 + length);
      this.handle(body);
    }
  }

  private handle(body: Buffer): void {
    const type = body.readUInt32BE(0);
    if (type === MUX_MSG_HELLO) {
      const version = body.length >= 8 ? body.readUInt32BE(4) : -1;
      const hello = this.hello;
      this.hello = null;
      if (version === MUX_VERSION) hello?.resolve();
      else hello?.reject(new Error(`the ssh control socket speaks multiplexing protocol ${String(version)}, not ${String(MUX_VERSION)}`));
      return;
    }
    if (body.length < 8) return;
    const waiting = this.pending.get(body.readUInt32BE(4));
    if (waiting === undefined) return;
    this.pending.delete(body.readUInt32BE(4));
    clearTimeout(waiting.timer);
    if (type === MUX_S_OK || type === MUX_S_REMOTE_PORT) {
      waiting.resolve();
    } else if (type === MUX_S_FAILURE || type === MUX_S_PERMISSION_DENIED) {
      const length = body.length >= 12 ? body.readUInt32BE(8) : 0;
      waiting.reject(new MuxRefusal(body.subarray(12, 12 + length).toString('utf8') || 'refused'));
    } else {
      waiting.reject(new Error(`the ssh control socket answered message type 0x${type.toString(16)}`));
    }
  }

  private fail(error: Error): void {
    if (this.closedWith !== null) return;
    this.closedWith = error;
    const hello = this.hello;
    this.hello = null;
    hello?.reject(error);
    for (const waiting of this.pending.values()) {
      clearTimeout(waiting.timer);
      waiting.reject(error);
    }
    this.pending.clear();
  }
}
