/**
 * Sockets that come and go, and one that stops reading (issue 13): thousands of sockets opening,
 * logging in or not, and closing leave the server as it was (no session, no file descriptor left);
 * a live session that stops reading is cut off at its buffer limit while the same user's other device
 * and everyone else carry on. SOCKET_CHURN sets how many sockets (default 2 000; 10 000 in
 * docs/reliability.md).
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { describe, it } from 'node:test';
import type { WebSocket } from 'ws';
import { textPair } from '../helpers/federation.js';
import { metricSum } from '../helpers/metrics.js';
import { startNetwork } from '../helpers/network.js';
import { connectRaw } from '../helpers/raw-client.js';
import { startServerProcess } from '../helpers/server-process.js';
import { assertSessionWorks, connectUser, login, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const CHURN = Number(process.env.SOCKET_CHURN ?? 2_000);
const AT_ONCE = 100;

const openFds = (pid: number): number => readdirSync(`/proc/${pid}/fd`).length;

describe('sockets that come and go, and one that stops reading', () => {
  it(`${CHURN} sockets open and close (a tenth log in first): no session or descriptor is left, and a bystander never notices`, async (t) => {
    await using server = await startServerProcess({ env: { SHINE_LOG_LEVEL: 'warn' } });
    const bob = makeUser('bob', ['local']);
    await using bystander = await connectUser(server.wsUrl, bob, 'bob-phone');
    const users = Array.from({ length: 10 }, (_, i) => makeUser(`churn${i}`, ['local']));
    for (const u of users) await (await connectUser(server.wsUrl, u, 'first')).close();
    const sessions = () => metricSum(server.httpUrl, 'shine_sessions_open');
    await waitUntil(async () => (await sessions()) === 1, 10_000, 'only the bystander open');
    const fdsBefore = openFds(server.pid);
    const rssBefore = server.rssKiB();
    const started = performance.now();

    for (let done = 0; done < CHURN; done += AT_ONCE) {
      await Promise.all(
        Array.from({ length: Math.min(AT_ONCE, CHURN - done) }, async (_, k) => {
          const c = await connectRaw(server.wsUrl);
          const n = done + k;
          if (n % 10 === 0) assert.equal((await login(c, users[n % users.length]!, `d${n % 7}`)).ok, true);
          // Half close politely, half just drop the connection.
          if (n % 2 === 0) await c.close();
          else {
            c.socket.terminate();
            await c.closed;
          }
        }),
      );
    }
    const seconds = (performance.now() - started) / 1000;
    await waitUntil(async () => (await sessions()) === 1, 20_000, 'every churned session gone');
    // The descriptors of closed sockets are released (a few may still be in the kernel's hands).
    await waitUntil(() => openFds(server.pid) <= fdsBefore + 5, 20_000, 'descriptors released');
    await assertSessionWorks(bystander);
    t.diagnostic(
      `${CHURN} sockets in ${seconds.toFixed(1)} s; descriptors ${fdsBefore} → ${openFds(server.pid)}; ` +
        `RSS ${Math.round(rssBefore / 1024)} → ${Math.round(server.rssKiB() / 1024)} MiB`,
    );
  });

  it('a session that stops reading is cut off at its buffer limit; the same user’s other device and a bystander get everything', async () => {
    const limit = 128 * 1024;
    await using net = await startNetwork({
      servers: [{ serverLogin: 'alpha', wsMaxBufferedBytes: limit, rateLimit: { perSecond: 1e6, burst: 1e6 } }],
    });
    const server = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    await using aliceSession = await connectUser(server.wsUrl, alice);
    await using laptop = await connectUser(server.wsUrl, bob, 'laptop');
    await using stuck = await connectRaw(server.wsUrl);
    assert.equal((await login(stuck, bob, 'stuck-phone')).ok, true);
    const serverSide = server.ctx.hub.sessionsOf('bob').map((s) => (s as unknown as { ws: WebSocket }).ws);
    stuck.socket.pause();

    // Live messages to bob while the phone reads nothing, until the server cuts it off (the kernel's
    // socket buffers take a few MB first, then the server's own buffer passes the limit).
    const pairs: ReturnType<typeof textPair>[] = [];
    const cutOff = () => server.ctx.hub.sessionsOf('bob').length === 1;
    for (let i = 0; i < 1_000 && !cutOff(); i++) {
      const p = textPair(alice, bob.login, { body: 'x'.repeat(30_000 + i) });
      pairs.push(p);
      await aliceSession.call('SendMessagePair', {
        incomingBlobB64: p.incomingBlobB64,
        outgoingBlobB64: p.outgoingBlobB64,
      });
    }
    await waitUntil(cutOff, 10_000, 'the stuck phone cut off');
    assert.ok(
      serverSide.some((ws) => ws.readyState >= 2),
      'its socket was closed by the server',
    );
    // The phone, reading again, sees the connection end without a close frame (terminated, not closed);
    // left paused, closing it at the end would wait out ws's 30 s close timeout.
    stuck.socket.resume();
    assert.equal((await stuck.closed).code, 1006);
    const received = () => laptop.events.filter((e) => e.op === 'DirectMessage').length;
    await waitUntil(() => received() === pairs.length, 10_000, 'the laptop got every message');
    assert.equal(await metricSum(server.httpUrl, 'shine_ws_slow_consumer_closed_total'), 1);
    await assertSessionWorks(laptop);
    await assertSessionWorks(aliceSession);
  });
});
