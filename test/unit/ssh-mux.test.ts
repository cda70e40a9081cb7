import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MuxClient, MuxRefusal } from '../../daemon/podman/ssh-mux.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface Request {
  type: number;
  id: number;
  forwardType: number;
  listen: string;
  listenPort: number;
  connect: string;
  connectPort: number;
}

function u32(value: number): Buffer {
  const buffer = Buffer.alloc(4);
  buffer.writeUInt32BE(value >>> 0);
  return buffer;
}

function frame(...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([u32(body.length), body]);
}

/**
 * Stands in for an ssh ControlMaster's control socket as PROTOCOL.mux describes it: says hello
 * with `version`, reads the client's hello, then answers each forward request with `answer`.
 */
async function master(version: number, answer: (request: Request) => Buffer | null): Promise<{ path: string; requests: Request[] }> {
  const dir = mkdtempSync('/tmp/sbx-mux-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const socket = path.join(dir, 'control');
  const requests: Request[] = [];
  const server = net.createServer((client) => {
    client.write(frame(u32(1), u32(version)));
    let buffer = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (buffer.length >= 4 && buffer.length >= 4 + buffer.readUInt32BE(0)) {
        const body = buffer.subarray(4, 4 + buffer.readUInt32BE(0));
        buffer = buffer.subarray(4 + buffer.readUInt32BE(0));
        if (body.readUInt32BE(0) === 1) continue;
        let at = 12;
        const text = (): string => {
          const length = body.readUInt32BE(at);
          const value = body.subarray(at + 4, at + 4 + length).toString();
          at += 4 + length;
          return value;
        };
        const listen = text();
        const listenPort = body.readUInt32BE(at);
        at += 4;
        const connect = text();
        const request = { type: body.readUInt32BE(0), id: body.readUInt32BE(4), forwardType: body.readUInt32BE(8), listen, listenPort, connect, connectPort: body.readUInt32BE(at) };
        requests.push(request);
        const reply = answer(request);
        if (reply !== null) client.write(reply);
      }
    });
    client.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  cleanup.add(() => new Promise((resolve) => server.close(resolve)));
  return { path: socket, requests };
}

const ok = (request: Request): Buffer => frame(u32(0x80000001), u32(request.id));

describe('MuxClient: OpenSSH\'s mux protocol on a control socket', () => {
  it('asks for a remote streamlocal forward and its cancellation, as PROTOCOL.mux spells them', async () => {
    const control = await master(4, ok);
    const client = await MuxClient.connect(control.path);
    cleanup.add(() => {
      client.close();
    });
    await client.openRemoteForward('/vm/dir/agent.sock', '/host/end.sock');
    await client.closeRemoteForward('/vm/dir/agent.sock', '/host/end.sock');
    expect(control.requests).toEqual([
      { type: 0x10000006, id: 1, forwardType: 2, listen: '/vm/dir/agent.sock', listenPort: 0xfffffffe, connect: '/host/end.sock', connectPort: 0xfffffffe },
      { type: 0x10000007, id: 2, forwardType: 2, listen: '/vm/dir/agent.sock', listenPort: 0xfffffffe, connect: '/host/end.sock', connectPort: 0xfffffffe },
    ]);
  });

  it('matches answers to requests sent back to back, and gives a refusal in the master\'s words', async () => {
    const control = await master(4, (request) =>
      request.listen === '/refused' ? frame(u32(0x80000003), u32(request.id), u32(7), Buffer.from('no bind')) : ok(request),
    );
    const client = await MuxClient.connect(control.path);
    cleanup.add(() => {
      client.close();
    });
    const results = await Promise.allSettled([client.openRemoteForward('/a', '/h'), client.openRemoteForward('/refused', '/h'), client.openRemoteForward('/b', '/h')]);
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const refusal = (results[1] as PromiseRejectedResult).reason as Error;
    expect(refusal).toBeInstanceOf(MuxRefusal);
    expect(refusal.message).toBe('no bind');
  });

  it('refuses a master of another protocol version, and fails what is pending when the master goes', async () => {
    const old = await master(3, ok);
    await expect(MuxClient.connect(old.path)).rejects.toThrow('speaks multiplexing protocol 3, not 4');
    const silent = await master(4, () => null);
    const client = await MuxClient.connect(silent.path);
    const pending = client.openRemoteForward('/a', '/h');
    client.close();
    await expect(pending).rejects.toThrow('closed');
    await expect(client.openRemoteForward('/b', '/h')).rejects.toThrow('closed');
  });
});
