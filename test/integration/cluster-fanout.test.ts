/**
 * Two `shine serve` processes of one server on one database and one Redis prefix (docs/protocol.md
 * §9.2, decision 28): alice's sessions on process 1, bob's on process 2. Every event (messages,
 * receipts, delivery states, calls) crosses through Redis, and a push goes only to a device with no
 * session on either process.
 *
 * carol's profile (from a directory file) names only the server `ghost`, which nobody knows: a pair
 * to her fails its first attempt and ends `failed` at the schedule's last offset, a state change
 * after the answer. Process 1's worker ticks once an hour, so process 2 (where the pair was sent)
 * makes that change and alice's session on process 1 can only hear of it through Redis.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import { encodeReceiptBody } from '../../src/protocol/container.js';
import type { OpResults, PairAnswer } from '../../src/protocol/ops.js';
import type { Cluster } from '../helpers/cluster.js';
import { startCluster } from '../helpers/cluster.js';
import { seedOf, testPair } from '../helpers/containers.js';
import { metricSum } from '../helpers/metrics.js';
import type { PushEndpoint } from '../helpers/push-endpoint.js';
import { makeSubscriptionKeys, startPushEndpoint } from '../helpers/push-endpoint.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const blobs = (p: { incoming: Container; outgoing: Container }) => ({
  incomingBlobB64: toBase64(p.incoming.bytes),
  outgoingBlobB64: toBase64(p.outgoing.bytes),
});

describe('two processes of one server: events and presence through Redis', () => {
  let dir: string;
  let cluster: Cluster;
  let endpoint: PushEndpoint;
  let redis: Redis;
  const clients: RawClient[] = [];
  const alice = makeUser('alice', ['cluster'], seedOf('alice'));
  const bob = makeUser('bob', ['cluster'], seedOf('bob'));
  const carol = makeUser('carol', ['ghost'], seedOf('carol'));

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'shine-fanout-'));
    const directoryFile = join(dir, 'directory.json');
    await writeFile(directoryFile, JSON.stringify({ servers: [], users: [carol.profile] }));
    endpoint = await startPushEndpoint();
    cluster = await startCluster({
      processes: 1,
      env: {
        SHINE_LOG_LEVEL: process.env.SHINE_TEST_LOG_LEVEL ?? 'error',
        SHINE_DIRECTORY_FILE: directoryFile,
        SHINE_WEBPUSH_ALLOW_INSECURE: '1',
        SHINE_RETRY_SCHEDULE_MS: '0,300',
        SHINE_PEER_CHECK_ATTEMPTS: '',
        SHINE_WORKER_TICK_MS: '3600000',
      },
    });
    await cluster.startProcess({ SHINE_WORKER_TICK_MS: '50' });
    redis = new Redis(cluster.redis!.url);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    redis?.disconnect();
    await cluster?.close();
    await endpoint?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Every session opened, by deviceId (the tests go on with the sessions of those before). */
  const byDevice = new Map<string, RawClient>();
  const connect = async (n: 0 | 1, user: typeof alice, deviceId: string) => {
    const client = await connectUser(cluster.processes[n]!.wsUrl, user, deviceId);
    clients.push(client);
    byDevice.set(deviceId, client);
    return client;
  };
  /** The devices Redis holds as having a session (on any process). */
  const present = async (login: string) =>
    (await redis.zrangebyscore(`${cluster.redis!.prefix}presence:${login}`, '-inf', '+inf')).map(
      (m) => m.split(' ')[0],
    );

  it('bob gets the message, alice the receipt and the state change, the push only the device offline', async () => {
    const [p1, p2] = cluster.processes as [(typeof cluster.processes)[0], (typeof cluster.processes)[0]];
    const alicePhone = await connect(0, alice, 'alice-phone');
    const bobPhone = await connect(1, bob, 'bob-phone');
    const keys = makeSubscriptionKeys();
    for (const deviceId of ['bob-phone', 'bob-tablet']) {
      await bobPhone.call<OpResults['UpsertPushToken']>('UpsertPushToken', {
        endpoint: `${endpoint.origin}/${deviceId}`,
        p256dhB64: keys.p256dhB64,
        authB64: keys.authB64,
        deviceId,
      });
    }
    await waitUntil(async () => (await present('bob')).includes('bob-phone'), 5_000, "bob's presence in Redis");

    // alice (process 1) → bob (process 2).
    const t0 = Date.now();
    const text = testPair({ from: 'alice', to: 'bob', timeMs: t0 });
    const sent = await alicePhone.call<PairAnswer>('SendMessagePair', blobs(text));
    assert.equal(sent.deliveryState, 'delivered');
    assert.equal(sent.deliveredWsSessions, 1, 'bob-phone, on the other process');
    assert.equal(sent.deliveredWebPushSessions, 1, 'bob-tablet only');
    const dm = await bobPhone.waitFor((f) => f.op === 'DirectMessage');
    assert.equal((dm.payload as { messageKey: string }).messageKey, sent.incomingKey);
    await waitUntil(() => endpoint.to('/bob-tablet').length === 1, 10_000, 'push to bob-tablet');
    assert.equal(endpoint.to('/bob-phone').length, 0, 'bob-phone has a session on process 2');

    // bob's read receipt (process 2) → alice (process 1).
    const receipt = testPair({
      type: 3,
      from: 'bob',
      to: 'alice',
      timeMs: t0 + 1,
      body: encodeReceiptBody({ readAtMs: t0 + 1, targetTimeMs: t0, targetNonce: 1 }),
    });
    const read = await bobPhone.call<PairAnswer>('SendMessagePair', blobs(receipt));
    assert.equal(read.deliveredWsSessions, 1);
    const got = await alicePhone.waitFor(
      (f) => f.op === 'DirectMessage' && (f.payload as { messageType: number }).messageType === 3,
    );
    assert.equal((got.payload as { messageKey: string }).messageKey, read.incomingKey);

    // A pair sent through process 2 fails there after the answer; alice's phone on process 1 hears it.
    const aliceLaptop = await connect(1, alice, 'alice-laptop');
    const lost = await aliceLaptop.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'carol', timeMs: t0 + 2 })),
    );
    assert.equal(lost.deliveryState, 'accepted');
    const changed = await alicePhone.waitFor((f) => f.op === 'DmDeliveryStateChanged', 15_000);
    assert.deepEqual(changed.payload, {
      baseKey: lost.baseKey,
      outgoingKey: lost.outgoingKey,
      deliveryState: 'failed',
    });
    // alice-laptop's own copy went to alice-phone too (it is another device of the sender).
    await alicePhone.waitFor(
      (f) => f.op === 'DirectMessage' && (f.payload as { messageKey: string }).messageKey === lost.outgoingKey,
    );

    // Each process received from the other through Redis.
    assert.ok((await metricSum(p1.httpUrl, 'shine_fanout_received_total')) >= 3);
    assert.ok((await metricSum(p2.httpUrl, 'shine_fanout_received_total')) >= 1);
    assert.equal(await metricSum(p1.httpUrl, 'shine_redis_up'), 1);
  });

  it("a call rings bob's session on the other process, pushes only his device offline, and bob's answer reaches both of alice's", async () => {
    const session = (deviceId: string): RawClient => byDevice.get(deviceId)!;
    const [alicePhone, aliceLaptop, bobPhone] = [session('alice-phone'), session('alice-laptop'), session('bob-phone')];
    const before = endpoint.to('/bob-tablet').length;
    const invite = await alicePhone.call<OpResults['CallInviteBroadcast']>('CallInviteBroadcast', {
      toLogin: 'bob',
      callId: 'call-1',
      payloadB64: '',
    });
    assert.deepEqual(invite, { deliveredWsSessions: 1, deliveredWebPushSessions: 1 });
    const ring = await bobPhone.waitFor((f) => f.op === 'CallInvite');
    assert.deepEqual(ring.payload, { fromLogin: 'alice', callId: 'call-1', payloadB64: '' });
    await waitUntil(() => endpoint.to('/bob-tablet').length === before + 1, 10_000, 'call push to bob-tablet');
    assert.equal(endpoint.to('/bob-phone').length, 0);
    // bob answers on process 2: alice's phone on process 1 and her laptop on process 2 get it.
    const answer = await bobPhone.call<OpResults['CallSignal']>('CallSignal', {
      toLogin: 'alice',
      callId: 'call-1',
      kind: 'answer',
      payloadB64: '',
    });
    assert.equal(answer.deliveredWsSessions, 2);
    for (const c of [alicePhone, aliceLaptop]) {
      const got = await c.waitFor((f) => f.op === 'CallSignal');
      assert.deepEqual(got.payload, { fromLogin: 'bob', callId: 'call-1', kind: 'answer', payloadB64: '' });
    }
  });

  it('a device is not pushed while it has a session on the other process, and is once that session closed', async () => {
    const bobTab = await connect(0, bob, 'bob-tablet');
    await waitUntil(async () => (await present('bob')).includes('bob-tablet'), 5_000, 'tablet present');
    const before = endpoint.to('/bob-tablet').length;
    const alice2 = await connect(1, alice, 'alice-desk');
    const a = await alice2.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: Date.now() })),
    );
    // Both of bob's devices have a session (one per process): nobody is pushed.
    assert.equal(a.deliveredWebPushSessions, 0);
    assert.equal(a.deliveredWsSessions, 2);
    await bobTab.close();
    await waitUntil(async () => !(await present('bob')).includes('bob-tablet'), 5_000, 'tablet gone');
    const b = await alice2.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: Date.now() + 1 })),
    );
    assert.equal(b.deliveredWebPushSessions, 1);
    await waitUntil(() => endpoint.to('/bob-tablet').length === before + 1, 10_000, 'tablet pushed');
    assert.equal(endpoint.to('/bob-phone').length, 0);
  });
});
