/**
 * Faults of client sockets that must not stop the server: a client that stops answering pings is
 * terminated and its presence ends; a device whose backlog is larger than the socket's buffer limit
 * gets all of it on login, in order, paced by its reading, instead of being cut off as a slow socket.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { WebSocket } from 'ws';
import type { DirectMessageEvent, OpResults } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import { metricSum } from '../helpers/metrics.js';
import { startNetwork } from '../helpers/network.js';
import { connectRaw } from '../helpers/raw-client.js';
import { pairOf, seedFor, sendAll } from '../helpers/replication.js';
import { assertSessionWorks, connectUser, login, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

/** The server side of login's sessions (its socket), for what only the server can see. */
const serverSockets = (server: RunningServer, login: string): WebSocket[] =>
  server.ctx.hub.sessionsOf(login).map((s) => (s as unknown as { ws: WebSocket }).ws);

describe('transport faults', () => {
  // 50 ms: every socket pinged on one tick; 400 ms: four ticks of 100 ms, each pinging its slice of the sockets.
  for (const wsPingIntervalMs of [50, 400]) {
    it(`a client that stops answering pings is terminated and its presence ends; a live one stays (ping interval ${wsPingIntervalMs} ms)`, async () => {
      await using net = await startNetwork({ servers: [{ serverLogin: 'alpha', wsPingIntervalMs }] });
      const server = net.servers[0]!;
      const carol = makeUser('carol', ['alpha']);
      const bob = makeUser('bob', ['alpha']);
      await using healthy = await connectUser(server.wsUrl, bob);
      let pings = 0;
      healthy.socket.on('ping', () => pings++);

      // Answers pings by hand while it logs in (a loaded machine may need several intervals), then goes silent.
      await using dead = await connectRaw(server.wsUrl, { autoPong: false });
      let answering = true;
      dead.socket.on('ping', (data: Buffer) => answering && dead.socket.pong(data));
      await dead.call('RegisterUser', { profile: carol.profile });
      assert.equal((await login(dead, carol)).ok, true);
      assert.equal(server.ctx.hub.sessionsOf('carol').length, 1);
      answering = false;

      await Promise.race([
        dead.closed,
        waitUntil(() => false, 5_000, 'the silent client closed').catch((err: unknown) => assert.fail(String(err))),
      ]);
      await waitUntil(() => server.ctx.hub.sessionsOf('carol').length === 0, 5_000, "carol's presence ended");
      await waitUntil(() => pings >= 3, 5_000, 'three pings to the live client');
      await assertSessionWorks(healthy);
      assert.equal(server.ctx.hub.sessionsOf('bob').length, 1);
    });
  }

  it('replay after login waits for the socket to drain: a backlog larger than wsMaxBufferedBytes arrives whole, in order, and a request answered meanwhile does not cut the socket off', async () => {
    const limit = 384 * 1024;
    await using net = await startNetwork({
      servers: [{ serverLogin: 'alpha', wsMaxBufferedBytes: limit, rateLimit: { perSecond: 1e6, burst: 1e6 } }],
    });
    const server = net.servers[0]!;
    const alice = makeUser('alice', ['alpha'], seedFor('alice'));
    const bob = makeUser('bob', ['alpha'], seedFor('bob'));
    // bob's phone is known (its first login replays nothing), then offline while alice writes.
    await (await connectUser(server.wsUrl, bob, 'phone')).close();
    await using aliceSession = await connectUser(server.wsUrl, alice);
    const t = Date.now() - 60_000;
    const pairs = Array.from({ length: 60 }, (_, i) =>
      pairOf({ from: 'alice', to: 'bob', timeMs: t + i, nonce: i + 1 }, { kind: 'text', bodyBytes: 60_000 }),
    );
    await sendAll(
      aliceSession,
      pairs.map((pair) => ({ pair })),
      4,
    );
    const backlogBytes = pairs.reduce((n, p) => n + p.incomingBlobB64.length, 0);
    assert.ok(backlogBytes > 10 * limit, `the backlog (${backlogBytes} B) is far above the limit`);

    await using phone = await connectRaw(server.wsUrl);
    assert.equal((await login(phone, bob, 'phone')).ok, true);
    // The phone stops reading: the replay must wait for room instead of overrunning the buffer.
    phone.socket.pause();
    let closedEarly = false;
    void phone.closed.then(() => (closedEarly = true));
    // (A paused client does not see its socket closed: the server's side shows it.)
    await waitUntil(
      () => serverSockets(server, 'bob').every((ws) => ws.bufferedAmount > 0),
      20_000,
      "the server's buffer for the phone filled, or the server cut the phone off",
    );
    // A page of two messages (about 160 KB) asked while the replay waits: it fits in the room the replay left
    // (half the limit). A replay that filled the buffer to its limit left less than one message's room.
    const history = phone.request<OpResults['GetDirectMessages']>('GetDirectMessages', {
      peerLogin: 'alice',
      limit: 2,
    });
    await waitUntil(
      async () => (await metricSum(server.httpUrl, 'shine_ops_total', { op: 'GetDirectMessages' })) > 0,
      10_000,
      'the history request answered',
    );
    phone.socket.resume();
    const received = () => phone.events.filter((e) => e.op === 'DirectMessage').length;
    await waitUntil(() => closedEarly || received() >= pairs.length, 30_000, 'the whole backlog arrived');
    assert.equal(closedEarly, false, 'the phone was closed as a slow socket');
    const page = await history;
    assert.equal(page.ok && page.payload.items.length, 2, 'the history page arrived after the replay');
    const events = phone.events.filter((e) => e.op === 'DirectMessage').map((e) => e.payload as DirectMessageEvent);
    assert.deepEqual(
      events.map((e) => e.messageKey),
      pairs.map((p) => `${p.baseKey}|1`),
      'every message once, in the order stored',
    );
    await assertSessionWorks(phone);
  });
});
