/**
 * WebPush against a real server and a real push endpoint on loopback (docs/protocol.md §5.5). The endpoint is a
 * plain HTTP server in the test (SHINE_WEBPUSH_ALLOW_INSECURE=1) that checks each request's VAPID JWT
 * and decrypts its body with node:crypto alone, so the library's output is checked independently.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import webpush from 'web-push';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import { encodeReceiptBody } from '../../src/protocol/container.js';
import type { OpResults, PairAnswer } from '../../src/protocol/ops.js';
import { ManualClock } from '../../src/server/clock.js';
import type { PushSubscriptionHealth } from '../../src/server/push/service.js';
import { assertError } from '../helpers/assert.js';
import { seedOf, testPair } from '../helpers/containers.js';
import { metricSum } from '../helpers/metrics.js';
import { startNetwork } from '../helpers/network.js';
import type { PushEndpoint, SubscriptionKeys } from '../helpers/push-endpoint.js';
import { checkVapid, decryptPush, makeSubscriptionKeys, startPushEndpoint } from '../helpers/push-endpoint.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import type { TestUser } from '../helpers/users.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const ADMIN = 'push-admin-token';

/** A user of server alpha whose key is the containers helper's, so testPair signs as them. */
const pairUser = (name: string): TestUser => makeUser(name, ['alpha'], seedOf(name));

const blobs = (p: { incoming: Container; outgoing: Container }) => ({
  incomingBlobB64: toBase64(p.incoming.bytes),
  outgoingBlobB64: toBase64(p.outgoing.bytes),
});

/** Subscribes a device of the session's user to endpoint.origin + path. */
function subscribe(client: RawClient, endpoint: PushEndpoint, path: string, keys: SubscriptionKeys, deviceId?: string) {
  return client.call<OpResults['UpsertPushToken']>('UpsertPushToken', {
    endpoint: endpoint.origin + path,
    p256dhB64: keys.p256dhB64,
    authB64: keys.authB64,
    ...(deviceId ? { deviceId } : {}),
  });
}

/** GET /debug/push?owner=… — the owner's subscriptions by deviceId. */
async function pushHealth(httpUrl: string, owner: string): Promise<Map<string, PushSubscriptionHealth>> {
  const res = await fetch(`${httpUrl}/debug/push?owner=${owner}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { owner: string; subscriptions: PushSubscriptionHealth[] };
  assert.equal(body.owner, owner);
  return new Map(body.subscriptions.map((s) => [s.deviceId, s]));
}

/**
 * alpha and beta federated; alice on alpha with a session (`a`); carol on beta with one subscribed
 * device (`carol-phone` at endpoint /carol-phone) and no open session.
 */
async function aliceOnAlphaCarolOfflineOnBeta() {
  const endpoint = await startPushEndpoint();
  const net = await startNetwork({
    federate: true,
    servers: [
      { serverLogin: 'alpha', webPushAllowInsecure: '1' },
      { serverLogin: 'beta', webPushAllowInsecure: '1' },
    ],
  });
  const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
  const a = await connectUser(alpha.wsUrl, pairUser('alice'));
  const c = await connectUser(beta.wsUrl, makeUser('carol', ['beta'], seedOf('carol')), 'carol-laptop');
  const keys = makeSubscriptionKeys();
  await subscribe(c, endpoint, '/carol-phone', keys, 'carol-phone');
  const { vapidPublicKey } = await c.call<OpResults['GetWebPushConfig']>('GetWebPushConfig', {});
  await c.close();
  await waitUntil(() => beta.ctx.hub.sessionsOf('carol').length === 0, 10_000, 'carol offline');
  return {
    endpoint,
    beta,
    a,
    keys,
    vapidPublicKey,
    async [Symbol.asyncDispose]() {
      await a.close();
      await net.close();
      await endpoint.close();
    },
  };
}

describe('push: a content-free push to each device without a session', () => {
  it('is signed (VAPID), decrypts to exactly the dm JSON, skips devices with a session, reaches them once they log out', async () => {
    await using endpoint = await startPushEndpoint();
    await using net = await startNetwork({
      servers: [{ serverLogin: 'alpha', adminToken: ADMIN, webPushAllowInsecure: '1' }],
    });
    const server = net.servers[0]!;
    const alice = pairUser('alice');
    const bob = pairUser('bob');
    await using a = await connectUser(server.wsUrl, alice, 'alice-phone');
    const laptop = await connectUser(server.wsUrl, bob, 'laptop');
    const { vapidPublicKey } = await laptop.call<OpResults['GetWebPushConfig']>('GetWebPushConfig', {});
    assert.match(vapidPublicKey, /^[A-Za-z0-9_-]{87}$/, '65 bytes, unpadded base64url');
    const phoneKeys = makeSubscriptionKeys();
    const laptopKeys = makeSubscriptionKeys();
    // The laptop registers the phone's subscription too (deviceId given), and its own (the session's).
    assert.deepEqual(await subscribe(laptop, endpoint, '/phone', phoneKeys, 'phone'), { stored: true });
    assert.deepEqual(await subscribe(laptop, endpoint, '/laptop', laptopKeys), { stored: true });
    assert.deepEqual([...(await pushHealth(server.httpUrl, 'bob')).keys()].sort(), ['laptop', 'phone']);

    const t0 = Date.now();
    const first = await a.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: t0 })),
    );
    assert.equal(first.deliveredWsSessions, 1, 'the laptop session got the event');
    assert.equal(first.deliveredWebPushSessions, 1, 'only the phone, which has no session, is pushed');
    await waitUntil(() => endpoint.to('/phone').length === 1, 10_000, 'push to the phone');
    await server.ctx.push.idle();
    assert.equal(endpoint.to('/laptop').length, 0, 'no push to a device with an open session');

    const push = endpoint.to('/phone')[0]!;
    checkVapid(push.headers.authorization, vapidPublicKey, endpoint.origin);
    assert.equal(push.headers['content-encoding'], 'aes128gcm');
    assert.equal(push.headers.ttl, '86400');
    const topic = String(push.headers.topic);
    assert.match(topic, /^[A-Za-z0-9_-]{1,32}$/);
    assert.ok(!topic.includes('alice'), 'the topic does not name the sender');
    const plain = decryptPush(push.body, phoneKeys);
    assert.equal(plain, JSON.stringify({ v: 1, kind: 'dm', fromLogin: 'alice', messageKey: first.incomingKey }));
    assert.ok(Buffer.byteLength(plain) <= 256);

    // The laptop logs out: the next message pushes to it too (and collapses under the same topic).
    await laptop.close();
    await waitUntil(() => server.ctx.hub.sessionsOf('bob').length === 0, 10_000, 'laptop session gone');
    const second = await a.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: t0 + 1, nonce: 2 })),
    );
    assert.equal(second.deliveredWsSessions, 0);
    assert.equal(second.deliveredWebPushSessions, 2);
    await waitUntil(() => endpoint.to('/laptop').length === 1 && endpoint.to('/phone').length === 2);
    const toLaptop = endpoint.to('/laptop')[0]!;
    checkVapid(toLaptop.headers.authorization, vapidPublicKey, endpoint.origin);
    assert.equal(
      decryptPush(toLaptop.body, laptopKeys),
      JSON.stringify({ v: 1, kind: 'dm', fromLogin: 'alice', messageKey: second.incomingKey }),
    );
    assert.equal(toLaptop.headers.topic, topic, 'one sender, one topic');
    const again = endpoint.to('/phone')[1]!;
    assert.equal(decryptPush(again.body, phoneKeys).includes(second.incomingKey), true);

    // A read receipt (type 3) does not push unless SHINE_WEBPUSH_RECEIPTS=1; nor does the sender's own copy.
    await using b = await connectUser(server.wsUrl, bob, 'desk');
    await subscribe(a, endpoint, '/alice-tablet', makeSubscriptionKeys(), 'alice-tablet');
    const receipt = testPair({
      type: 3,
      from: 'bob',
      to: 'alice',
      timeMs: t0 + 2,
      body: encodeReceiptBody({ readAtMs: t0 + 2, targetTimeMs: t0, targetNonce: 1 }),
    });
    const receiptAnswer = await b.call<PairAnswer>('SendMessagePair', blobs(receipt));
    assert.equal(receiptAnswer.deliveredWebPushSessions, 0);
    await server.ctx.push.idle();
    assert.equal(endpoint.to('/alice-tablet').length, 0);
    assert.equal(endpoint.received.length, 3, 'no other push was made');

    // SendTestWebPush: one `test` push to each subscription, counted by the first answers.
    endpoint.reply('/laptop', { status: 400 });
    const test = await b.call<OpResults['SendTestWebPush']>('SendTestWebPush', {});
    assert.deepEqual(test, { sent: 1, failed: 1 });
    assert.equal(decryptPush(endpoint.to('/phone')[2]!.body, phoneKeys), JSON.stringify({ v: 1, kind: 'test' }));
    assert.equal(await metricSum(server.httpUrl, 'shine_push_sent_total'), 4);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_failed_total', { reason: '400' }), 1);
  });

  it('reaches the recipient through ReceiveIncomingMessage on its server (two servers)', async () => {
    await using world = await aliceOnAlphaCarolOfflineOnBeta();
    const { endpoint, a, keys, vapidPublicKey } = world;
    const sent = await a.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'carol', timeMs: Date.now() })),
    );
    assert.equal(sent.deliveryState, 'delivered');
    assert.equal(sent.deliveredWebPushSessions, 0, 'counted on the recipient server, not in the sender answer');
    await waitUntil(() => endpoint.to('/carol-phone').length === 1, 10_000, 'push from beta');
    const push = endpoint.to('/carol-phone')[0]!;
    checkVapid(push.headers.authorization, vapidPublicKey, endpoint.origin);
    assert.equal(
      decryptPush(push.body, keys),
      JSON.stringify({ v: 1, kind: 'dm', fromLogin: 'alice', messageKey: sent.incomingKey }),
    );
  });

  it('rings an offline callee on another server with a `call` push (TTL 60, Urgency high)', async () => {
    await using world = await aliceOnAlphaCarolOfflineOnBeta();
    const { endpoint, beta, a, keys, vapidPublicKey } = world;

    const rang = await a.call<OpResults['CallInviteBroadcast']>('CallInviteBroadcast', {
      toLogin: 'carol',
      callId: 'call-42',
      payloadB64: 'b2ZmZXI=',
    });
    assert.deepEqual(rang, { deliveredWsSessions: 0, deliveredWebPushSessions: 1 }, 'summed over beta’s answer');
    await waitUntil(() => endpoint.to('/carol-phone').length === 1, 10_000, 'call push from beta');
    const push = endpoint.to('/carol-phone')[0]!;
    checkVapid(push.headers.authorization, vapidPublicKey, endpoint.origin);
    assert.equal(push.headers.ttl, '60');
    assert.equal(push.headers.urgency, 'high');
    assert.equal(
      decryptPush(push.body, keys),
      JSON.stringify({ v: 1, kind: 'call', fromLogin: 'alice', callId: 'call-42' }),
    );

    // Signals after the invite never push: only an invite wakes a device.
    await a.call('CallSignal', { toLogin: 'carol', callId: 'call-42', kind: 'cancel', payloadB64: '' });
    await beta.ctx.push.idle();
    assert.equal(endpoint.to('/carol-phone').length, 1);
  });
});

describe('push: answers of the push service', () => {
  it('410 deletes the subscription; 429 is retried after its Retry-After; 500 gives up after 3 retries', async () => {
    await using endpoint = await startPushEndpoint();
    const clock = new ManualClock(Date.now());
    await using net = await startNetwork({
      clock,
      servers: [{ serverLogin: 'alpha', adminToken: ADMIN, webPushAllowInsecure: '1' }],
    });
    const server = net.servers[0]!;
    const health = () => pushHealth(server.httpUrl, 'bob');
    await using a = await connectUser(server.wsUrl, pairUser('alice'));
    await using b = await connectUser(server.wsUrl, pairUser('bob'), 'desk');
    endpoint.reply('/gone', { status: 410 });
    endpoint.reply('/busy', [{ status: 429, headers: { 'retry-after': '120' } }, { status: 201 }]);
    endpoint.reply('/broken', { status: 500 });
    for (const device of ['gone', 'busy', 'broken'])
      await subscribe(b, endpoint, `/${device}`, makeSubscriptionKeys(), device);

    const start = clock.now();
    const answer = await a.call<PairAnswer>(
      'SendMessagePair',
      blobs(testPair({ from: 'alice', to: 'bob', timeMs: start })),
    );
    assert.equal(answer.deliveredWebPushSessions, 3);
    /** Moves the clock to `at` ms after the send, then waits for the pushes and health writes it causes. */
    const advanceTo = async (at: number, expect: { busy: number; broken: number; brokenFailures: number }) => {
      clock.advance(start + at - clock.now());
      await waitUntil(
        async () =>
          endpoint.to('/busy').length === expect.busy &&
          endpoint.to('/broken').length === expect.broken &&
          (await health()).get('broken')?.consecutiveFailures === expect.brokenFailures,
        10_000,
        `state at +${at} ms`,
      );
      await server.ctx.push.idle();
    };

    await advanceTo(0, { busy: 1, broken: 1, brokenFailures: 1 });
    await waitUntil(async () => !(await health()).has('gone'), 10_000, 'gone subscription deleted');
    assert.equal(endpoint.to('/gone').length, 1);
    let h = await health();
    assert.equal(h.get('busy')!.lastError, '429');
    assert.equal(h.get('busy')!.consecutiveFailures, 1);
    assert.equal(h.get('broken')!.lastError, '500');
    assert.equal(await metricSum(server.httpUrl, 'shine_push_subscriptions_removed_total'), 1);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_retries_pending'), 2);

    // 500: backoff 5 s, 30 s, 120 s. 429: not before its Retry-After of 120 s, though the backoff is 5 s.
    await advanceTo(5_000, { busy: 1, broken: 2, brokenFailures: 2 });
    await advanceTo(35_000, { busy: 1, broken: 3, brokenFailures: 3 });
    await advanceTo(119_999, { busy: 1, broken: 3, brokenFailures: 3 });
    await advanceTo(120_000, { busy: 2, broken: 3, brokenFailures: 3 });
    await waitUntil(async () => (await health()).get('busy')?.consecutiveFailures === 0, 10_000, 'busy recovered');
    h = await health();
    assert.equal(h.get('busy')!.lastSuccessAtMs, start + 120_000);
    assert.equal(h.get('busy')!.lastErrorAtMs, start, 'the 429 stays on record');

    await advanceTo(155_000, { busy: 2, broken: 4, brokenFailures: 4 });
    await advanceTo(RETRY_HORIZON_MS, { busy: 2, broken: 4, brokenFailures: 4 });
    h = await health();
    assert.deepEqual(
      { lastError: h.get('broken')!.lastError, at: h.get('broken')!.lastErrorAtMs, origin: h.get('broken')!.origin },
      { lastError: '500', at: start + 155_000, origin: endpoint.origin },
    );
    assert.equal(await metricSum(server.httpUrl, 'shine_push_retries_pending'), 0);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_retries_total'), 4);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_failed_total', { reason: '500' }), 1);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_failed_total', { reason: 'gone' }), 1);
    assert.equal(await metricSum(server.httpUrl, 'shine_push_sent_total'), 1);
  });
});

const RETRY_HORIZON_MS = 3_600_000;

describe('push: UpsertPushToken and DeletePushToken', () => {
  const P256 = makeSubscriptionKeys();
  const good = { endpoint: 'https://push.example.com/sub/1', p256dhB64: P256.p256dhB64, authB64: P256.authB64 };

  it('refuses endpoints that are not https with a host name, and malformed keys, storing nothing', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha', adminToken: ADMIN }] });
    const server = net.servers[0]!;
    await using b = await connectUser(server.wsUrl, pairUser('bob'));
    const point = Buffer.from(P256.p256dhB64, 'base64url');
    const offCurve = Buffer.from(point);
    offCurve[64]! ^= 1;
    const compressed = Buffer.from(point);
    compressed[0] = 0x05;
    const refused: [string, Record<string, unknown>][] = [
      ['http endpoint', { endpoint: 'http://push.example.com/sub/1' }],
      ['http loopback without the insecure flag', { endpoint: 'http://127.0.0.1:9/sub' }],
      ['IPv4 literal', { endpoint: 'https://10.0.0.1/sub' }],
      ['IPv4 in hex', { endpoint: 'https://0x7f.1/sub' }],
      ['IPv6 literal', { endpoint: 'https://[::1]/sub' }],
      ['localhost', { endpoint: 'https://localhost/sub' }],
      ['a localhost subdomain', { endpoint: 'https://push.localhost/sub' }],
      ['a single-label host', { endpoint: 'https://intranet/sub' }],
      ['credentials in the URL', { endpoint: 'https://user:pw@push.example.com/sub' }],
      ['not a URL', { endpoint: 'push.example.com/sub' }],
      ['p256dh of 64 bytes', { p256dhB64: point.subarray(0, 64).toString('base64url') }],
      ['p256dh of 66 bytes', { p256dhB64: Buffer.concat([point, Buffer.of(0)]).toString('base64url') }],
      ['p256dh not uncompressed', { p256dhB64: compressed.toString('base64url') }],
      ['p256dh off the curve', { p256dhB64: offCurve.toString('base64url') }],
      ['auth of 15 bytes', { authB64: Buffer.alloc(15, 1).toString('base64url') }],
      ['auth of 17 bytes', { authB64: Buffer.alloc(17, 1).toString('base64url') }],
      ['p256dh not base64', { p256dhB64: '***' }],
      ['auth in two alphabets', { authB64: 'ab-/AAAAAAAAAAAAAAAAAA' }],
      ['auth with a dangling character', { authB64: 'AAAAAAAAAAAAAAAAAAAAAAA' }],
      ['a bad deviceId', { deviceId: 'a b' }],
      ['empty endpoint', { endpoint: '' }],
    ];
    for (const [what, change] of refused) {
      const answer = await b.request('UpsertPushToken', { ...good, ...change });
      assertError(answer, 400, 'BAD_FIELDS', { op: 'UpsertPushToken' });
      assert.equal((await pushHealth(server.httpUrl, 'bob')).size, 0, `${what}: nothing stored`);
    }
    // Standard base64 with padding is the same key as unpadded base64url.
    const padded = {
      ...good,
      p256dhB64: point.toString('base64'),
      authB64: Buffer.from(P256.authB64, 'base64url').toString('base64'),
    };
    assert.match(padded.authB64, /==$/);
    assert.deepEqual(await b.call('UpsertPushToken', padded), { stored: true });
    assert.equal((await pushHealth(server.httpUrl, 'bob')).size, 1);
    // Before AuthLogin there is no owner.
    await using anon = await connectRaw(server.wsUrl);
    assertError(await anon.request('UpsertPushToken', good), 401, 'NOT_AUTHENTICATED');
  });

  it('keeps 10 per login, dropping the least recently upserted; deletes only the caller’s own', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha', adminToken: ADMIN }] });
    const server = net.servers[0]!;
    await using b = await connectUser(server.wsUrl, pairUser('bob'));
    await using a = await connectUser(server.wsUrl, pairUser('alice'));
    const upsert = (i: number) =>
      b.call('UpsertPushToken', { ...good, endpoint: `https://push.example.com/sub/${i}`, deviceId: `d${i}` });
    const devices = async () => [...(await pushHealth(server.httpUrl, 'bob')).keys()].sort();
    const names = (...ids: number[]) => ids.map((i) => `d${i}`).sort();
    for (let i = 0; i < 10; i++) await upsert(i);
    assert.deepEqual(await devices(), names(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
    await upsert(10);
    assert.deepEqual(await devices(), names(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 'the 11th dropped the oldest');
    await upsert(1); // re-subscribed: now the newest
    await upsert(11);
    assert.deepEqual(await devices(), names(1, 3, 4, 5, 6, 7, 8, 9, 10, 11), 'd2 was the least recently upserted');

    const own = { endpoint: 'https://push.example.com/sub/5' };
    assert.deepEqual(await a.call('DeletePushToken', own), { deleted: 0 }, "another user's endpoint");
    assert.equal((await devices()).length, 10);
    assert.deepEqual(await b.call('DeletePushToken', own), { deleted: 1 });
    assert.deepEqual(await b.call('DeletePushToken', own), { deleted: 0 });
    assert.deepEqual(await devices(), names(1, 3, 4, 6, 7, 8, 9, 10, 11));
    assert.deepEqual(await b.call('DeletePushToken', { endpoint: 'not a url' }), { deleted: 0 });
  });
});

describe('push: VAPID keys', () => {
  it('are made at first start and kept in the database; a configured pair must match', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    const first = net.servers[0]!.ctx.push.vapidPublicKey;
    await net.stop(0);
    await net.start(0);
    assert.equal(net.servers[0]!.ctx.push.vapidPublicKey, first, 'the same key after a restart');

    const [mine, other] = [webpush.generateVAPIDKeys(), webpush.generateVAPIDKeys()];
    await assert.rejects(
      startNetwork({ servers: [{ vapidPublicKey: mine.publicKey, vapidPrivateKey: other.privateKey }] }),
      /is not the public key of SHINE_VAPID_PRIVATE_KEY/,
    );
    await using own = await startNetwork({
      servers: [{ vapidPublicKey: mine.publicKey, vapidPrivateKey: mine.privateKey }],
    });
    assert.equal(own.servers[0]!.ctx.push.vapidPublicKey, mine.publicKey);
  });
});
