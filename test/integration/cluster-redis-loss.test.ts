/**
 * Losing Redis (docs/protocol.md §9.2, decision 28): two processes of one server on a Redis of the
 * test's own, which is killed (SIGKILL) for a while and started again, empty, at the same port.
 * Meanwhile every send is stored and reaches the sessions on its own process; no process dies; once
 * Redis is back fan-out resumes and every session replays from the store what it missed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import type { OpResults, PairAnswer } from '../../src/protocol/ops.js';
import type { Cluster } from '../helpers/cluster.js';
import { startCluster } from '../helpers/cluster.js';
import { seedOf, testPair } from '../helpers/containers.js';
import { metricSum } from '../helpers/metrics.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { RedisServer } from '../helpers/redis-server.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { freshRedisPrefix } from '../helpers/test-db.js';
import type { TestUser } from '../helpers/users.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const blobs = (p: { incoming: Container; outgoing: Container }) => ({
  incomingBlobB64: toBase64(p.incoming.bytes),
  outgoingBlobB64: toBase64(p.outgoing.bytes),
});

const keyOf = (f: object) => (f as { payload?: { messageKey?: string } }).payload?.messageKey ?? '';

/** The messageKeys of the DirectMessage events a session got. */
const received = (c: RawClient) => new Set(c.events.filter((e) => e.op === 'DirectMessage').map(keyOf));

const DURING = 5;

describe('a cluster losing Redis for a while', () => {
  let redis: RedisServer;
  let cluster: Cluster;
  const clients: RawClient[] = [];
  const alice = makeUser('alice', ['cluster'], seedOf('alice'));
  const bob = makeUser('bob', ['cluster'], seedOf('bob'));

  before(async () => {
    redis = await startRedisServer();
    cluster = await startCluster({
      processes: 2,
      redis: { url: redis.url, prefix: freshRedisPrefix() },
      env: { SHINE_LOG_LEVEL: process.env.SHINE_TEST_LOG_LEVEL ?? 'error' },
    });
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await cluster?.close();
    await redis?.close();
  });

  const connect = async (n: number, user: TestUser, deviceId: string) => {
    const client = await connectUser(cluster.processes[n]!.wsUrl, user, deviceId);
    clients.push(client);
    return client;
  };
  const redisUp = async (n: number) => metricSum(cluster.processes[n]!.httpUrl, 'shine_redis_up');

  it('no process dies, local sessions are served, fan-out resumes and every device gets everything stored', async () => {
    const [p1, p2] = [cluster.processes[0]!, cluster.processes[1]!];
    const alicePhone = await connect(0, alice, 'alice-phone');
    const bobLaptop = await connect(0, bob, 'bob-laptop');
    const bobPhone = await connect(1, bob, 'bob-phone');
    const t0 = Date.now();
    const warm = await alicePhone.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: t0 })),
    );
    await bobPhone.waitFor((f) => f.op === 'DirectMessage' && keyOf(f) === warm.incomingKey);

    await redis.stop();
    await waitUntil(async () => (await redisUp(0)) === 0 && (await redisUp(1)) === 0, 10_000, 'both notice');

    // Stored and answered as ever; the sessions on the sending process get them live.
    const during: PairAnswer[] = [];
    for (let i = 1; i <= DURING; i++) {
      const pair = testPair({ from: 'alice', to: 'bob', timeMs: t0 + i });
      during.push(await alicePhone.call<PairAnswer>('SendMessagePair', blobs(pair)));
    }
    for (const a of during) assert.equal(a.deliveryState, 'delivered');
    await waitUntil(() => during.every((a) => received(bobLaptop).has(a.incomingKey)), 5_000, 'bob-laptop live');
    const back = await bobPhone.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'bob', to: 'alice', timeMs: t0 + 100 })),
    );
    assert.ok((await metricSum(p1.httpUrl, 'shine_redis_publish_failed_total')) >= DURING);

    // Both processes still answer, logins included.
    for (const p of [p1, p2]) assert.equal((await fetch(`${p.httpUrl}/healthz`)).status, 200);
    const late = await connect(1, alice, 'alice-tablet');
    await late.call<OpResults['GetConversations']>('GetConversations', {});

    await redis.start();
    await waitUntil(async () => (await redisUp(0)) === 1 && (await redisUp(1)) === 1, 15_000, 'both back');

    // What the other process stored meanwhile is replayed from the store.
    await waitUntil(() => during.every((a) => received(bobPhone).has(a.incomingKey)), 15_000, 'bob-phone replayed');
    await waitUntil(() => received(alicePhone).has(back.incomingKey), 15_000, 'alice-phone replayed');
    await waitUntil(() => received(bobLaptop).has(back.outgoingKey), 15_000, "bob's own copy replayed on process 1");
    for (const p of [p1, p2]) assert.ok((await metricSum(p.httpUrl, 'shine_fanout_resyncs_total')) >= 1);

    // Live fan-out across processes again.
    const after = await alicePhone.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: t0 + 200 })),
    );
    assert.equal(after.deliveredWsSessions, 2);
    await bobPhone.waitFor((f) => f.op === 'DirectMessage' && keyOf(f) === after.incomingKey);
    await late.waitFor((f) => f.op === 'DirectMessage' && keyOf(f) === after.outgoingKey);

    // Nothing stored was lost: bob's history holds every message.
    const history = await bobPhone.call<OpResults['GetDirectMessages']>('GetDirectMessages', {
      peerLogin: 'alice',
      limit: 50,
    });
    const keys = new Set(history.items.map((m) => m.messageKey));
    for (const a of [warm, ...during, after]) assert.ok(keys.has(a.incomingKey), a.incomingKey);
    assert.ok(keys.has(back.outgoingKey));
  });
});
