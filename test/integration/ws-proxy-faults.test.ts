/** The relay's faults for the chaos run (test/helpers/ws-proxy.ts): drop, cut, delay and heal. */
// test.mjs: no store (it starts no SHiNE server, so the PostgreSQL pass skips it)
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';

/** An upstream that answers every text frame with the same text. */
async function echoServer(): Promise<{ wsUrl: string; close(): Promise<void> }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => server.once('listening', r));
  server.on('connection', (s) => s.on('message', (d) => s.send(String(d))));
  return {
    wsUrl: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/ws`,
    close: () =>
      new Promise((r) => {
        for (const c of server.clients) c.terminate();
        server.close(() => r());
      }),
  };
}

/** Opens a socket through the relay; resolves with it and what it received, or rejects if it closes first. */
async function open(url: string): Promise<{ ws: WebSocket; got: string[]; closed: Promise<void> }> {
  const ws = new WebSocket(url);
  const got: string[] = [];
  ws.on('message', (d) => got.push(String(d)));
  const closed = new Promise<void>((r) => ws.once('close', () => r()));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return { ws, got, closed };
}

describe('ws-proxy faults', () => {
  it('drop closes the open connections; cut also refuses new ones until heal', async () => {
    const echo = await echoServer();
    await using relay = await startWsProxy(echo.wsUrl);
    try {
      const a = await open(relay.wsUrl);
      relay.drop();
      await a.closed;
      const b = await open(relay.wsUrl);
      b.ws.send('after drop');
      await waitUntil(() => b.got.length === 1, 5_000, 'echo after drop');

      relay.cut();
      await b.closed;
      // A new connection is closed as soon as it opens (or refused before).
      await open(relay.wsUrl).then(
        (c) => c.closed,
        () => undefined,
      );
      relay.heal();
      const c = await open(relay.wsUrl);
      c.ws.send('after heal');
      await waitUntil(() => c.got[0] === 'after heal', 5_000, 'echo after heal');
      c.ws.close();
    } finally {
      await echo.close();
    }
  });

  it('delay keeps the order of frames; heal ends the delay and closes half-open connections', async () => {
    const echo = await echoServer();
    await using relay = await startWsProxy(echo.wsUrl);
    try {
      const a = await open(relay.wsUrl);
      relay.delay(50);
      const sent = Array.from({ length: 20 }, (_, i) => `frame ${i}`);
      sent.forEach((t) => a.ws.send(t));
      await waitUntil(() => a.got.length === sent.length, 10_000, 'every delayed frame');
      assert.deepEqual(a.got, sent);

      relay.blackholeOpen();
      relay.heal();
      await a.closed;
      const b = await open(relay.wsUrl);
      b.ws.send('x');
      await waitUntil(() => b.got[0] === 'x', 5_000, 'echo after heal');
      b.ws.close();
    } finally {
      await echo.close();
    }
  });
});
