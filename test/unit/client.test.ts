import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { ShineClient, ShineClientError } from '../../src/client/client.js';

/** A stand-in server: answers by op name, so the client's framing can be tested without the real one. */
function stubServer(): Promise<{ url: string; wss: WebSocketServer }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (socket) => {
    socket.on('message', (data) => {
      const req = JSON.parse(String(data)) as {
        op: string;
        requestId: string;
        payload: { delayMs?: number; op?: string; payload?: unknown };
      };
      const answer = (frame: object): void =>
        socket.send(JSON.stringify({ op: req.op, requestId: req.requestId, ...frame }));
      if (req.op === 'Echo')
        setTimeout(() => answer({ status: 200, ok: true, payload: req.payload }), req.payload.delayMs ?? 0);
      else if (req.op === 'Emit') {
        socket.send(JSON.stringify({ op: req.payload.op, event: true, status: 200, payload: req.payload.payload }));
        answer({ status: 200, ok: true, payload: {} });
      } else if (req.op === 'Hang') {
        // never answers
      } else if (req.op === 'Drop') socket.terminate();
      else answer({ status: 404, ok: false, error: { code: 'UNKNOWN_OP', message: `unknown op ${req.op}` } });
    });
  });
  return new Promise((resolve) =>
    wss.on('listening', () => resolve({ url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/ws`, wss })),
  );
}

describe('ShineClient transport', () => {
  let server: Awaited<ReturnType<typeof stubServer>>;
  before(async () => {
    server = await stubServer();
  });
  after(() => new Promise<void>((resolve) => server.wss.close(() => resolve())));

  it('matches answers to requests even out of order', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket });
    const [slow, fast] = await Promise.all([client.call('Echo', { delayMs: 50, n: 1 }), client.call('Echo', { n: 2 })]);
    assert.deepEqual(slow, { delayMs: 50, n: 1 });
    assert.deepEqual(fast, { n: 2 });
    await client.close();
  });

  it('turns error answers into ShineClientError with code and status', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket });
    await assert.rejects(client.call('Nope'), (err: unknown) => {
      assert.ok(err instanceof ShineClientError);
      assert.equal(err.code, 'UNKNOWN_OP');
      assert.equal(err.status, 404);
      assert.equal(err.op, 'Nope');
      return true;
    });
    await client.close();
  });

  it('times out a request nobody answers', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket, requestTimeoutMs: 50 });
    await assert.rejects(client.call('Hang'), { code: 'TIMEOUT', status: 0 });
    await client.close();
  });

  it('delivers events to subscribers until they unsubscribe', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket });
    const seen: unknown[] = [];
    const off = client.on('DmDeliveryStateChanged', (p) => seen.push(p.deliveryState));
    client.on('Other', (p) => seen.push(p));
    await client.call('Emit', {
      op: 'DmDeliveryStateChanged',
      payload: { baseKey: 'b', outgoingKey: 'o', deliveryState: 'delivered' },
    });
    await client.call('Emit', { op: 'Other', payload: 7 });
    off();
    await client.call('Emit', { op: 'DmDeliveryStateChanged', payload: { deliveryState: 'failed' } });
    assert.deepEqual(seen, ['delivered', 7]);
    await client.close();
  });

  it('rejects pending requests when the connection drops, and later ones at once', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket });
    await assert.rejects(Promise.all([client.call('Hang'), client.call('Drop')]), { code: 'CLOSED' });
    await client.closed;
    await assert.rejects(client.call('Echo'), { code: 'CLOSED' });
  });

  it('fails to connect to a closed port', async () => {
    await assert.rejects(ShineClient.connect('ws://127.0.0.1:1/ws', { WebSocket }), { code: 'CLOSED' });
  });

  it('needs login before user operations', async () => {
    const client = await ShineClient.connect(server.url, { WebSocket });
    await assert.rejects(client.sendText('bob', 'hi'), { code: 'NOT_LOGGED_IN' });
    await client.close();
  });
});
