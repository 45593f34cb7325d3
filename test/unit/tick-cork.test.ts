/**
 * One write a tick (src/server/transport/tick-cork.ts), on a real ws server and client over loopback: the
 * frames a tick sends to one socket reach the kernel in one write, in order, and nothing is held past the tick.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { holdForTick } from '../../src/server/transport/tick-cork.js';

/** Counts the writes the socket hands to the kernel (each `_write` or `_writev` is one syscall's worth). */
function countWrites(socket: Socket): number[] {
  const writes: number[] = [];
  const s = socket as unknown as {
    _write: (...a: unknown[]) => void;
    _writev: (chunks: unknown[], ...a: unknown[]) => void;
  };
  const write = s._write.bind(socket);
  const writev = s._writev.bind(socket);
  s._write = (...a) => {
    writes.push(1);
    write(...a);
  };
  s._writev = (chunks, ...a) => {
    writes.push(chunks.length);
    writev(chunks, ...a);
  };
  return writes;
}

describe('holdForTick', () => {
  let wss: WebSocketServer;
  let server: { ws: WebSocket; socket: Socket };
  let client: WebSocket;
  const received: string[] = [];

  before(async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    await once(wss, 'listening');
    const accepted = once(wss, 'connection') as Promise<[WebSocket, { socket: Socket }]>;
    client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    client.on('message', (data) => received.push(String(data)));
    await once(client, 'open');
    const [ws, req] = await accepted;
    server = { ws, socket: req.socket };
  });

  after(async () => {
    client.terminate();
    await new Promise((resolve) => wss.close(resolve));
  });

  async function until(n: number): Promise<void> {
    while (received.length < n) await new Promise((r) => setTimeout(r, 5));
  }

  it("sends a tick's frames in one write, in order, after the tick", async () => {
    const writes = countWrites(server.socket);
    const sent: string[] = [];
    for (const text of ['one', 'two', 'three']) {
      holdForTick(server.socket);
      server.ws.send(text, () => sent.push(text));
    }
    assert.deepEqual(writes, [], 'nothing leaves during the tick');
    assert.equal(server.socket.writableCorked, 1);
    await new Promise((r) => process.nextTick(r));
    assert.equal(server.socket.writableCorked, 0);
    assert.deepEqual(writes, [6], "one writev with the three frames' headers and payloads");
    await until(3);
    assert.deepEqual(received, ['one', 'two', 'three']);
    assert.deepEqual(sent, ['one', 'two', 'three'], 'every send is called back');

    // The next tick's frame is not held behind anything: it leaves at the end of its own tick.
    await new Promise((r) => setImmediate(r));
    holdForTick(server.socket);
    server.ws.send('four');
    await new Promise((r) => process.nextTick(r));
    assert.deepEqual(writes, [6, 2]);
    await until(4);
    assert.equal(received[3], 'four');
  });

  it('lets a close in a held tick finish, with the frames before it', async () => {
    holdForTick(server.socket);
    server.ws.send('last');
    server.ws.close(1000, 'bye');
    const [code] = (await once(client, 'close')) as [number];
    assert.equal(code, 1000);
    assert.equal(received.at(-1), 'last');
  });
});
