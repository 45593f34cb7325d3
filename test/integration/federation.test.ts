/**
 * Delivery between federated servers (docs/protocol.md §6, §5.4) against real in-process servers with the hour
 * of retries compressed to 1.6 s through config. Every step waits on something a server shows: an
 * answer, an event, a delivery row, a metric; never on a fixed sleep.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import WebSocket from 'ws';
import { ShineClient, createIdentity, makeProfile } from '../../src/client/index.js';
import type { DirectMessageEvent } from '../../src/protocol/ops.js';
import { setTimeout as delay } from 'node:timers/promises';
import { ShineError } from '../../src/protocol/errors.js';
import { ManualClock } from '../../src/server/clock.js';
import {
  FAST,
  fastServer,
  adminSync,
  debugDelivery,
  deliveryEvent,
  deliveryRow,
  directMessageEvent,
  directMessagesFor,
  history,
  metric,
  opCount,
  sendPair,
  startHoldingPeer,
  startPeerCheckNetwork,
  textPair,
  waitForRow,
} from '../helpers/federation.js';
import type { RunningServer } from '../../src/server/app.js';
import type { NetworkServerSpec } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { connectRaw } from '../helpers/raw-client.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectUser, makeUser, profileFor } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { suiteConcurrency } from '../helpers/test-db.js';

const server = fastServer;
/**
 * alpha (as `alphaSpec`) and beta federated; alice@alpha (her session `a`) has had one message to bob@beta
 * delivered, so alpha holds bob's profile and has called beta. Disposing of it closes the session and the
 * network.
 */
async function alphaAndBeta(alphaSpec: NetworkServerSpec) {
  const net = await startNetwork({ federate: true, servers: [alphaSpec, server('beta')] });
  try {
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    const a = await connectUser(net.servers[0]!.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob)).close();
    assert.equal((await sendPair(a, textPair(alice, 'bob'))).deliveryState, 'delivered');
    return {
      net,
      alpha: net.servers[0]!,
      alice,
      bob,
      a,
      async [Symbol.asyncDispose]() {
        await a.close();
        await net[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await net[Symbol.asyncDispose]();
    throw err;
  }
}

/** alphaAndBeta, then beta stopped (net.start(1) brings it back). */
async function betaDown(alphaSpec: NetworkServerSpec) {
  const up = await alphaAndBeta(alphaSpec);
  try {
    await up.net.stop(1);
    return up;
  } catch (err) {
    await up[Symbol.asyncDispose]();
    throw err;
  }
}

/** alpha with a hand-moved clock and a small worker: a queue of 4 rows, 2 attempts at once. */
const smallWorker = (clock: ManualClock, workerTickMs: number, extra: NetworkServerSpec = {}): NetworkServerSpec =>
  server('alpha', { clock, workerTickMs, deliveryQueueSize: 4, deliveryPoolSize: 2, ...extra });

/** n pairs alice → bob sent together on session a, each answered `accepted` (beta is down or not answering). */
async function sendWhile(a: RawClient, alice: ReturnType<typeof makeUser>, n: number) {
  const pairs = Array.from({ length: n }, () => textPair(alice, 'bob'));
  const answers = await Promise.all(pairs.map((m) => sendPair(a, m)));
  assert.deepEqual(new Set(answers.map((x) => x.deliveryState)), new Set(['accepted']));
  return pairs;
}

/** n pairs sent together while beta is down (sendWhile). */
const sendWhileDown = (down: { a: RawClient; alice: ReturnType<typeof makeUser> }, n: number) =>
  sendWhile(down.a, down.alice, n);

/**
 * Fault injection, as with a stuck database: until released (or disposed of), the server's store hangs on every
 * copy (`hang`: the copies go on after the release) or refuses it with OVERLOADED (`refuse`), while its process
 * and its connections run on (pongs come back). `calls` counts the copies it got.
 */
function breakStore(s: RunningServer, how: 'hang' | 'refuse') {
  const messages = s.ctx.store.messages;
  const storeCopy = messages.storeCopy.bind(messages);
  let go = (): void => {};
  const released = new Promise<void>((resolve) => (go = resolve));
  const broken = {
    calls: 0,
    release(): void {
      go();
      messages.storeCopy = storeCopy;
    },
    [Symbol.dispose]: () => broken.release(),
  };
  messages.storeCopy = (input) => {
    broken.calls++;
    return how === 'hang'
      ? released.then(() => storeCopy(input))
      : Promise.reject(new ShineError('OVERLOADED', 'the database is stuck (test)'));
  };
  return broken;
}

/** For tests that count calls of one attempt: the worker's attempt 2 comes only after a minute. */
const SLOW_SECOND_ATTEMPT: NetworkServerSpec = { retryScheduleMs: '0,60000,120000,180000,240000' };

describe('federation: delivery to the recipient’s access servers', { concurrency: suiteConcurrency() }, () => {
  it('a) alice@alpha → bob@beta: delivered in the answer; bob’s open session gets the message (SDK end to end)', async () => {
    // Attempt 2 is far off: a slow first contact (ServerAuth both ways, profile imports) cannot meet it.
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', SLOW_SECOND_ATTEMPT), server('beta')],
    });
    const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
    const alice = createIdentity('alice');
    const bob = createIdentity('bob');
    await using ca = await ShineClient.connect(alpha.wsUrl, { WebSocket: WebSocket as never });
    await using cb = await ShineClient.connect(beta.wsUrl, { WebSocket: WebSocket as never });
    await ca.register(makeProfile(alice, ['alpha'], 1, Date.now()));
    await cb.register(makeProfile(bob, ['beta'], 1, Date.now()));
    await ca.login(alice, 'laptop');
    await cb.login(bob, 'phone');
    const got = new Promise<DirectMessageEvent>((resolve) => cb.on('DirectMessage', (e) => resolve(e)));

    const sent = await ca.sendText('bob', 'hello across servers');
    assert.equal(sent.deliveryState, 'delivered');
    assert.equal(sent.deliveredWsSessions, 0, 'bob is not local to alpha');
    const event = await got;
    assert.equal(event.messageKey, sent.incomingKey);
    assert.equal(event.fromLogin, 'alice');
    const opened = await cb.decryptEvent(event);
    assert.equal(opened.kind === 'text' && opened.text, 'hello across servers');

    const row = await deliveryRow(alpha, sent.outgoingKey);
    assert.equal(row?.state, 'delivered');
    assert.equal(row?.attempt, 1, 'the first attempt did it');
    // Exactly one call: beta authenticating back to alpha (to import alice's profile) during the first
    // attempt must not wake a second, concurrent attempt of the same row.
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 1);
    const [item] = (await cb.history('alice')).items;
    assert.equal(item?.messageKey, sent.incomingKey);
    assert.equal(item?.text, 'hello across servers');

    // A delete (types 5/6) is delivered the same way, and removes the message at bob's side too.
    const gone = new Promise<DirectMessageEvent>((resolve) =>
      cb.on('DirectMessage', (e) => e.messageType === 5 && resolve(e)),
    );
    const deleted = await ca.deleteMessage(sent);
    assert.equal(deleted.deliveryState, 'delivered');
    assert.equal((await gone).messageKey, deleted.incomingKey);
    assert.deepEqual((await cb.history('alice')).items, []);
  });

  it('b) bob on beta1+beta2 with beta1 down: delivered through beta2; beta1 is never sent the copy later', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', SLOW_SECOND_ATTEMPT), server('beta1'), server('beta2')],
    });
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta1', 'beta2']);
    await using a = await connectUser(net.servers[0]!.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob, 'desk')).close();
    await using b2 = await connectUser(net.servers[2]!.wsUrl, bob, 'phone');
    await net.stop(1);

    const m = textPair(alice, 'bob');
    const answer = await sendPair(a, m);
    assert.equal(answer.deliveryState, 'delivered', 'beta2 took it while beta1 was down');
    await directMessageEvent(b2, m.incomingKey);
    const row = await deliveryRow(net.servers[0]!, m.outgoingKey);
    assert.deepEqual([row?.state, row?.attempt, row?.nextAttemptAtMs], ['delivered', 1, null]);

    // The first attempt's call to beta1 runs on in the background (docs/protocol.md §6.2) until it fails; only then
    // is beta1 back, so any call it gets would be a later attempt.
    await net.servers[0]!.drain();
    // beta1 comes back while beta2 is down, so replication cannot fill it: what it holds is what delivery gave it.
    await net.stop(2);
    const beta1 = await net.start(1);
    const cycle = await adminSync(beta1);
    assert.equal(cycle.dmRows, 0);
    assert.ok(cycle.errors >= 1, 'the sync cycle could not reach beta2');
    await using b1 = await connectUser(beta1.wsUrl, bob, 'desk');
    assert.deepEqual(await history(b1, 'alice'), [], 'beta1 holds nothing it was not sent');
    assert.equal(
      await metric(beta1, 'shine_ops_total', { op: 'ReceiveIncomingMessage' }),
      0,
      'alpha never called beta1 again',
    );
    assert.deepEqual(await debugDelivery(net.servers[0]!, 'accepted'), [], 'alpha has nothing left to deliver');

    // Replication (docs/protocol.md §7), not delivery, brings the copy to beta1 once beta2 is back: silently.
    await net.start(2);
    // beta1 may still be backing off from beta2 for a moment: cycles are retried until one pulls the row.
    await waitUntil(async () => (await adminSync(beta1)).dmRows === 1, 10_000, 'a sync cycle on beta1 pulled the copy');
    const items = await history(b1, 'alice');
    assert.deepEqual(
      items.map((i) => i.messageKey),
      [m.incomingKey],
    );
    assert.deepEqual(directMessagesFor(b1, m.incomingKey), [], 'a synced copy is stored without an event');
    const outbox = (await (
      await fetch(`${beta1.httpUrl}/debug/outbox?owner=bob`, {
        headers: { authorization: `Bearer ${FAST.adminToken}` },
      })
    ).json()) as {
      synced: number;
      unsynced: number;
    };
    assert.deepEqual(
      { synced: outbox.synced, unsynced: outbox.unsynced },
      { synced: 1, unsynced: 0 },
      'the copy came from beta2, not from alpha',
    );
    assert.equal(await metric(beta1, 'shine_ops_total', { op: 'ReceiveIncomingMessage' }), 0);
  });

  it('c) both of bob’s servers down, one back before the last attempt: accepted, then delivered at the next attempt', async () => {
    // alpha's clock is moved by hand, so "the next attempt" is exact: attempt 3 at offset 800 ms.
    const clock = new ManualClock(Date.now());
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', { clock }), server('beta1'), server('beta2')],
    });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta1', 'beta2']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob, 'desk')).close();
    await (await connectUser(net.servers[2]!.wsUrl, bob, 'phone')).close();
    // An earlier message, with both up: alpha imports bob, and both of bob's servers get the copy (docs/protocol.md §6.2).
    const earlier = textPair(alice, 'bob');
    assert.equal((await sendPair(a, earlier)).deliveryState, 'delivered');
    await waitUntil(
      async () =>
        (await net.servers[1]!.ctx.store.messages.getCopy(earlier.incomingKey)) !== null &&
        (await net.servers[2]!.ctx.store.messages.getCopy(earlier.incomingKey)) !== null,
    );
    await net.stop(1);
    await net.stop(2);

    const m = textPair(alice, 'bob');
    const answer = await sendPair(a, m);
    assert.equal(answer.deliveryState, 'accepted', 'no route answered the first attempt');
    clock.advance(400);
    const second = await waitForRow(alpha, m.outgoingKey, (r) => r.attempt === 2);
    assert.equal(second.state, 'accepted');
    // Each route with its own cause, so an operator sees which server failed and why.
    const causes = second.lastError!.split('; ').sort();
    assert.equal(causes.length, 2, second.lastError!);
    assert.match(causes[0]!, /^beta1: .*(ECONNREFUSED|backing off|closed|not called)/);
    assert.match(causes[1]!, /^beta2: .*(ECONNREFUSED|backing off|closed|not called)/);
    const peersRoute = alpha.ctx.adminRoutes.find((r) => r.path === '/debug/peers')!;
    const { peers } = (await peersRoute.handle(new URL('http://x/debug/peers'), undefined as never)) as {
      peers: {
        serverLogin: string;
        state: string;
        connected: boolean;
        down: boolean;
        consecutiveFailures: number;
        dueRows: number;
      }[];
    };
    assert.deepEqual(
      peers.map((p) => [p.serverLogin, p.state, p.connected, p.down, p.consecutiveFailures > 0, p.dueRows]),
      [
        ['beta1', 'failing', false, true, true, 1],
        ['beta2', 'failing', false, true, true, 1],
      ],
    );

    const beta1 = await net.start(1);
    clock.advance(400);
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    const row = (await deliveryRow(alpha, m.outgoingKey))!;
    assert.deepEqual(
      [row.state, row.attempt],
      ['delivered', 3],
      'delivered at attempt 3, the first after beta1 came back',
    );
    assert.equal(await opCount(beta1, 'ReceiveIncomingMessage'), 1);
    await using b1 = await connectUser(beta1.wsUrl, bob, 'desk');
    assert.ok((await history(b1, 'alice')).some((i) => i.messageKey === m.incomingKey));
  });

  it('a backlog larger than the worker’s queue is attempted in one tick: the next pass comes as the queue runs low', async () => {
    // alpha's clock moves by hand: one worker tick fires, and no other until the test ends. The queue holds
    // 4 rows and the pool runs 2 at once, so 12 due rows need three passes.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(smallWorker(clock, 1000));
    const { net, alpha, a } = down;
    // Sent together, their first attempts share alpha's one failed dial (a later call would wait for the
    // redial, which this clock never reaches).
    const backlog = await sendWhileDown(down, 12);

    const beta = await net.start(1);
    clock.advance(1000); // the tick: every row is due (its attempts at 400 and 800 ms collapse into one)
    for (const m of backlog) await deliveryEvent(a, m.outgoingKey, 'delivered');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 12, 'each row attempted once');
    assert.equal(await metric(alpha, 'shine_delivery_attempts_total', { outcome: 'delivered' }), 12);
  });

  it('a send while beta is backing off is answered `accepted` at once; its call waits for the redial and delivers', async () => {
    // alpha's clock moves by hand: its redial of beta (and firstAttemptWaitMs) come only when the test says.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(server('alpha', { clock }));
    const { net, alpha, alice, a } = down;
    const refused = textPair(alice, 'bob');
    // Its dial was refused: the next waits out a backoff.
    assert.equal((await sendPair(a, refused)).deliveryState, 'accepted');

    // beta is back, but alpha learns it only at its redial. Without a route that could answer soon, the
    // answer does not wait for that redial (nor for the 5 s firstAttemptWaitMs, which this clock never
    // reaches). The clock moves on either way, so a failure here ends the test instead of hanging it.
    const beta = await net.start(1);
    const m = textPair(alice, 'bob');
    const answer = await sendPair(a, m).finally(() => clock.advance(100));
    assert.equal(answer.deliveryState, 'accepted');
    // The redial (the clock moved): the first attempt's call goes through, and its outcome comes as an event.
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    assert.equal((await deliveryRow(alpha, m.outgoingKey))!.attempt, 1, 'delivered by the first attempt');
    // The refused one by the wake-up that alpha's redial started: each sent once.
    await deliveryEvent(a, refused.outgoingKey, 'delivered');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 2);
  });

  it('a pair accepted moments before beta’s return is delivered at the return, not at its next offset a minute later', async () => {
    await using down = await betaDown(server('alpha', SLOW_SECOND_ATTEMPT));
    const { net, alpha, alice, a } = down;
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'accepted', 'its first attempt failed');
    const beta = await net.start(1);
    // alpha's background redial finds beta (or beta authenticates to alpha) and wakes its rows, this one too.
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    const row = (await deliveryRow(alpha, m.outgoingKey))!;
    assert.deepEqual([row.state, row.attempt], ['delivered', 1], 'an extra attempt; the schedule is as it was');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 1);
  });

  it('beta up all along but failing its calls (its store stuck): its first success delivers the rows kept for later at once', async () => {
    await using up = await alphaAndBeta(server('alpha', SLOW_SECOND_ATTEMPT));
    const { net, alpha, alice, a } = up;
    const beta = net.servers[1]!;

    // beta's store refuses to write copies; its connection to alpha stays up all along.
    using refused = breakStore(beta, 'refuse');
    const kept = [textPair(alice, 'bob'), textPair(alice, 'bob')];
    for (const m of kept) assert.equal((await sendPair(a, m)).deliveryState, 'accepted', 'its call failed');
    refused.release();

    // Nothing redials: alpha learns beta works again from the next call that succeeds.
    assert.equal((await sendPair(a, textPair(alice, 'bob'))).deliveryState, 'delivered');
    // The rows kept for later (their next attempt a minute away) go at once.
    for (const m of kept) await deliveryEvent(a, m.outgoingKey, 'delivered');
    for (const m of kept) assert.equal((await deliveryRow(alpha, m.outgoingKey))!.attempt, 1, 'an extra attempt');
  });

  // Two ways alpha learns beta does not answer: a call times out (s2sTimeoutMs), or a sender's wait runs out first.
  for (const [how, timeouts] of [
    ['a call timed out', { s2sTimeoutMs: 1000 }],
    ['a sender’s wait ran out', { s2sTimeoutMs: 5000, firstAttemptWaitMs: 1000 }],
  ] as const) {
    it(`beta connected but not answering (its store hangs; ${how}): one call at a time goes to it (the probe), the other sends are answered without a call, and the late answer delivers them all`, async () => {
      await using up = await alphaAndBeta(server('alpha', { ...SLOW_SECOND_ATTEMPT, ...timeouts }));
      const { net, alpha, alice, bob, a } = up;
      const beta = net.servers[1]!;
      using hung = breakStore(beta, 'hang');
      const first = textPair(alice, 'bob');
      assert.equal((await sendPair(a, first)).deliveryState, 'accepted', how);
      assert.ok(hung.calls >= 1); // alpha's own probe (decision 56) may have come too
      const peersRoute = alpha.ctx.adminRoutes.find((r) => r.path === '/debug/peers')!;
      const { peers } = (await peersRoute.handle(new URL('http://x/debug/peers'), undefined as never)) as {
        peers: { serverLogin: string; connected: boolean; down: boolean; notAnswering: boolean }[];
      };
      const row = peers.find((p) => p.serverLogin === 'beta')!;
      assert.deepEqual([row.connected, row.down, row.notAnswering], [true, false, true]);
      assert.equal(await metric(alpha, 'shine_delivery_peer_not_answering', { peer: 'beta' }), 1);

      // Five sends together: one probe goes to beta at most (one of them, or alpha's own), and no other call.
      const before = hung.calls;
      const kept = await sendWhile(a, alice, 5);
      assert.ok(hung.calls - before <= 1, `${hung.calls - before} calls for five sends`);
      const { lastError } = await waitForRow(alpha, kept[4]!.outgoingKey, (r) => r.lastError !== null);
      assert.equal(lastError, 'beta: not answering (one call at a time until one succeeds), not called');

      // beta's store works again. Nothing redials: the next call to succeed — a late answer, or the next
      // send's call — wakes the rows kept for later, though their next attempt is a minute away.
      hung.release();
      await sendPair(a, textPair(alice, 'bob'));
      for (const m of [first, ...kept]) await deliveryEvent(a, m.outgoingKey, 'delivered');
      assert.equal(await metric(alpha, 'shine_delivery_peer_not_answering', { peer: 'beta' }), 0);
      await using b = await connectUser(beta.wsUrl, bob);
      const keys = (await history(b, 'alice')).map((h) => h.messageKey);
      assert.equal(new Set(keys).size, keys.length, 'each held once');
      for (const m of [first, ...kept]) assert.ok(keys.includes(m.incomingKey));
    });
  }

  it('beta not answering while nothing more is sent to it: alpha probes it, and the pair kept for it goes as soon as it answers', async () => {
    await using up = await alphaAndBeta(server('alpha', { ...SLOW_SECOND_ATTEMPT, s2sTimeoutMs: 1000 }));
    const { net, alpha, alice, a } = up;
    using hung = breakStore(net.servers[1]!, 'hang');
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'accepted', 'its call timed out');
    // No send and no regular attempt (a minute away) calls beta: alpha's own probe does, and waits too.
    await waitUntil(() => hung.calls >= 2);
    assert.ok((await metric(alpha, 'shine_delivery_probes_total', { peer: 'beta' })) >= 1, 'the probe is counted');
    hung.release();
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    assert.equal((await deliveryRow(alpha, m.outgoingKey))!.attempt, 1, 'an extra attempt (or the probe itself)');
  });

  it('beta back and calling alpha: alpha’s call waiting out its backoff goes at once', async () => {
    // alpha's clock moves by hand and never reaches its redial of beta; only beta's ServerAuth tells alpha.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(server('alpha', { clock }));
    const { net, alpha, alice, bob, a } = down;
    assert.equal((await sendPair(a, textPair(alice, 'bob'))).deliveryState, 'accepted'); // alpha backs off
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'accepted');
    const beta = await net.start(1);
    try {
      // bob writes to alice: beta calls alpha and authenticates, and alpha's waiting call to beta goes.
      await using b = await connectUser(beta.wsUrl, bob);
      assert.equal((await sendPair(b, textPair(bob, 'alice'))).deliveryState, 'delivered');
      await deliveryEvent(a, m.outgoingKey, 'delivered');
    } finally {
      clock.advance(5000); // a hang here would otherwise keep the servers from closing
    }
    assert.equal((await deliveryRow(alpha, m.outgoingKey))!.attempt, 1, 'delivered by the first attempt');
  });

  it('alpha stops without waiting for its calls to beta, which is down, to wait out the backoff; their rows stay `accepted`', async () => {
    // alpha's clock moves by hand and never reaches its redial of beta by itself.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(server('alpha', { clock }));
    const { net, alpha, alice, a } = down;
    assert.equal((await sendPair(a, textPair(alice, 'bob'))).deliveryState, 'accepted'); // alpha backs off
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'accepted', 'answered at once: beta is down');
    assert.equal(await metric(alpha, 'shine_s2s_calls_open', { peer: 'beta' }), 1, 'its call waits out the backoff');
    const stopped = net.stop(0).then(() => true);
    const inTime = await Promise.race([stopped, delay(5000).then(() => false)]);
    clock.advance(1000); // ends a wait for the redial (a hang), so that the servers close either way
    await stopped;
    assert.ok(inTime, 'alpha stopped without waiting for the redial');
    const restarted = await net.start(0);
    const row = (await deliveryRow(restarted, m.outgoingKey))!;
    assert.deepEqual([row.state, row.attempt], ['accepted', 1], 'kept for the worker');
  });

  it('the worker does not wait for a server that is down: a down peer’s rows hold neither the pool nor their profile refresh', async () => {
    // alpha's clock moves by hand, so its redial of beta never comes by itself. The pool runs 2 attempts at
    // once; were each to wait for the redial, the third row would never get its turn. Every attempt refreshes
    // bob's profile first (profileRefreshMs 0), and the later rows' refresh comes while alpha backs off from
    // beta: it must not wait for beta either.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(smallWorker(clock, 100, { profileRefreshMs: 0 }));
    const { net, alpha, a } = down;
    const early = await sendWhileDown(down, 3);
    clock.advance(100);
    const late = await sendWhileDown(down, 3);

    clock.advance(300); // 400 ms: the early rows' attempt 2; a dial to beta fails, alpha backs off
    try {
      for (const m of early) await waitForRow(alpha, m.outgoingKey, (r) => r.attempt === 2);
      clock.advance(100); // 500 ms: the late rows' attempt 2, with alpha backing off
      for (const m of late) await waitForRow(alpha, m.outgoingKey, (r) => r.attempt === 2);
    } finally {
      clock.advance(200); // a hang here would otherwise keep the servers from closing
    }
    const rows = [...early, ...late];
    const causes = await Promise.all(rows.map(async (m) => (await deliveryRow(alpha, m.outgoingKey))!.lastError));
    assert.ok(
      causes.some((c) => /^beta: down \(its last connection failed\), not called$/.test(c!)),
      causes.join(' | '),
    );

    // beta back: alpha's redial finds it and wakes the rows (attempt 3 at 800 ms may still find it down and
    // skip it); every row is delivered, one call each.
    const beta = await net.start(1);
    clock.advance(200);
    for (const m of rows) await deliveryEvent(a, m.outgoingKey, 'delivered');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 6);
  });

  it('an attempt whose call failed just before beta came back does not push its row to the next offset: the wake-up covers it', async () => {
    // alpha's clock moves by hand. The second attempt (7 s, past the wake-up's three call timeouts) calls
    // beta while it is down; its outcome is held until beta is back and alpha has woken beta's rows.
    const clock = new ManualClock(Date.now());
    await using down = await betaDown(server('alpha', { clock, retryScheduleMs: '0,7000,600000,1200000,1800000' }));
    const { net, alpha, alice, a } = down;
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'accepted');

    const rows = alpha.ctx.store.delivery;
    const finish = rows.finishDelivery.bind(rows);
    const wakeUp = rows.wakeDeliveriesFor.bind(rows);
    let held = (): void => {};
    const attemptHeld = new Promise<void>((resolve) => (held = resolve));
    let release = (): void => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let wakes = 0;
    rows.finishDelivery = async (...args) => {
      if (args[0] === m.outgoingKey && args[2].attempt === 2) {
        held();
        await released;
      }
      return finish(...args);
    };
    rows.wakeDeliveriesFor = async (...args) => {
      const n = await wakeUp(...args);
      wakes++;
      return n;
    };

    clock.advance(7000);
    await attemptHeld; // the second attempt's call failed; it is about to set the row's next offset (10 min)
    await net.start(1);
    // alpha's background redial finds beta back and wakes its rows (the held one was due: left alone).
    await waitUntil(() => (clock.advance(100), wakes > 0), 10_000, 'alpha woke beta’s rows');
    release();
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    const row = (await deliveryRow(alpha, m.outgoingKey))!;
    assert.deepEqual([row.state, row.attempt], ['delivered', 2], 'an extra attempt after attempt 2');
    assert.ok(clock.now() < row.acceptedAtMs + 600_000, 'not at the next offset');
  });

  it('when several offsets passed while the sender’s server was down, it makes one attempt, not several', async () => {
    const clock = new ManualClock(Date.now());
    await using net = await startNetwork({ federate: true, servers: [server('alpha', { clock }), server('beta')] });
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    const m = textPair(alice, 'bob');
    {
      await using a = await connectUser(net.servers[0]!.wsUrl, alice);
      await (await connectUser(net.servers[1]!.wsUrl, bob)).close();
      assert.equal((await sendPair(a, textPair(alice, 'bob'))).deliveryState, 'delivered');
      await net.stop(1);
      assert.equal((await sendPair(a, m)).deliveryState, 'accepted');
    }
    await net.stop(0);
    clock.advance(1300); // offsets 400, 800 and 1200 pass while alpha is down
    const alpha = await net.start(0);
    const row = await waitForRow(alpha, m.outgoingKey, (r) => r.attempt > 1);
    assert.deepEqual(
      [row.state, row.attempt, row.nextAttemptAtMs],
      ['accepted', 4, row.acceptedAtMs + 1600],
      'one attempt, counted as the one at 1200 ms',
    );
    assert.equal(await metric(alpha, 'shine_delivery_attempts_total', { outcome: 'retry' }), 1);
    assert.equal(await metric(alpha, 'shine_s2s_errors_total', { peer: 'beta' }), 1, 'one call to beta');

    // The last attempt, with beta back, delivers.
    await using a = await connectUser(alpha.wsUrl, alice);
    const beta = await net.start(1);
    clock.advance(300);
    await deliveryEvent(a, m.outgoingKey, 'delivered');
    assert.deepEqual(
      [(await deliveryRow(alpha, m.outgoingKey))!.attempt, await opCount(beta, 'ReceiveIncomingMessage')],
      [5, 1],
    );
  });

  it('d) bob’s server down for the whole hour: the row ends failed and is never attempted again', async () => {
    // The last attempt 4 s in: beta's restart below must come before the later message's last attempt.
    await using down = await betaDown(server('alpha', { retryScheduleMs: '0,400,800,1200,4000' }));
    const { net, alpha, alice, bob, a } = down;

    const lost = textPair(alice, 'bob');
    assert.equal((await sendPair(a, lost)).deliveryState, 'accepted');
    await deliveryEvent(a, lost.outgoingKey, 'failed');
    const failed = (await debugDelivery(alpha, 'failed')).find((r) => r.outgoingKey === lost.outgoingKey);
    assert.ok(failed, '/debug/delivery?state=failed lists the row');
    assert.equal(failed.attempt, 5, 'all five attempts of the schedule were made');
    assert.equal(failed.nextAttemptAtMs, null);
    assert.equal(typeof failed.lastError, 'string');
    assert.equal(await metric(alpha, 'shine_delivery_attempts_total', { outcome: 'failed' }), 1);

    // A later message to bob, sent while beta is still down and delivered by the worker once it is back:
    // the worker ran with bob reachable, and it did not pick the failed row.
    const later = textPair(alice, 'bob');
    assert.equal((await sendPair(a, later)).deliveryState, 'accepted');
    const beta = await net.start(1);
    await deliveryEvent(a, later.outgoingKey, 'delivered');
    await using b = await connectUser(beta.wsUrl, bob);
    const keys = (await history(b, 'alice')).map((i) => i.messageKey);
    assert.ok(keys.includes(later.incomingKey));
    assert.ok(!keys.includes(lost.incomingKey), 'bob never receives the failed message');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 1, 'only the later message was sent to beta');
    const still = (await deliveryRow(alpha, lost.outgoingKey))!;
    assert.deepEqual(
      [still.state, still.attempt, still.rowVersion],
      ['failed', failed.attempt, failed.rowVersion],
      'the failed row was not touched',
    );
    assert.ok(
      !a.events.some(
        (e) =>
          e.op === 'DmDeliveryStateChanged' &&
          (e.payload as { outgoingKey: string }).outgoingKey === lost.outgoingKey &&
          (e.payload as { deliveryState: string }).deliveryState === 'delivered',
      ),
    );
  });

  it('e) alice on alpha1+alpha2: the pair reaches alpha2, which delivers it; alpha1 then takes `delivered` from alpha2 without calling beta', async () => {
    await using setting = await startPeerCheckNetwork();
    const { net, alpha1, alpha2, clock1, alice, a1 } = setting;
    const m = textPair(alice, 'bob');
    const answer = await sendPair(a1, m);
    assert.equal(answer.deliveryState, 'accepted');
    // alpha1 forwarded the pair (ReceiveOutcomingMessage); alpha2 stored it and runs its own delivery.
    await waitForRow(alpha2, m.outgoingKey, (r) => r.state === 'accepted');
    await using a2 = await connectUser(alpha2.wsUrl, alice, 'phone');
    const outgoing = (await history(a2, 'bob')).find((i) => i.messageKey === m.outgoingKey);
    assert.ok(outgoing, 'alpha2 has the outgoing copy in alice’s history');
    assert.equal(outgoing.messageType, 2);

    const beta = await net.start(2);
    await deliveryEvent(a2, m.outgoingKey, 'delivered');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 1, 'alpha2 delivered');
    const waiting = (await deliveryRow(alpha1, m.outgoingKey))!;
    assert.deepEqual([waiting.state, waiting.attempt], ['accepted', 1], 'alpha1 has not attempted again yet');

    const checksBefore = await opCount(alpha2, 'GetDmDeliveryStatus');
    clock1.advance(400);
    await deliveryEvent(a1, m.outgoingKey, 'delivered');
    const row = (await deliveryRow(alpha1, m.outgoingKey))!;
    assert.deepEqual([row.state, row.attempt], ['delivered', 2]);
    assert.ok(row.proof, 'with beta’s receipt');
    assert.deepEqual(row.proof, (await deliveryRow(alpha2, m.outgoingKey))!.proof, 'the one alpha2 holds');
    assert.equal(await opCount(alpha2, 'GetDmDeliveryStatus'), checksBefore + 1, 'alpha1 asked alpha2');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), 1, 'alpha1 did not call beta');
    assert.equal(await metric(beta, 'shine_ops_total', { op: 'ReceiveIncomingMessage' }), 1);
  });

  it('e) with alpha2 not answering (its store refuses copies), alpha1 does not ask it the peer check: its attempt goes to beta without that wait', async () => {
    await using setting = await startPeerCheckNetwork();
    const { alpha1, alpha2, clock1, alice, a1 } = setting;
    // dave is on alpha2 only: alpha1's delivery to him gets alpha2's 503, and alpha2 is not answering.
    await (await connectUser(alpha2.wsUrl, makeUser('dave', ['alpha2']))).close();
    using _refused = breakStore(alpha2, 'refuse');
    assert.equal((await sendPair(a1, textPair(alice, 'dave'))).deliveryState, 'accepted', 'alpha2 answered 503');
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, m)).deliveryState, 'accepted', 'beta is down');
    const checksBefore = await opCount(alpha2, 'GetDmDeliveryStatus');
    // alpha1's clock moves until attempt 2 (400 ms, with a peer check) has run: the first attempt's call to
    // beta waits out alpha1's backoff from its earlier failed dial first.
    await waitUntil(async () => (clock1.advance(50), (await deliveryRow(alpha1, m.outgoingKey))!.attempt >= 2));
    const row = (await deliveryRow(alpha1, m.outgoingKey))!;
    assert.equal(row.state, 'accepted');
    assert.match(row.lastError!, /^beta: /, 'alpha1 called (or skipped) beta itself');
    assert.equal(await opCount(alpha2, 'GetDmDeliveryStatus'), checksBefore, 'alpha2 was not asked');
  });

  it('e) a failing peer check never blocks alpha1’s own attempt: with alpha2 down, alpha1 calls beta itself', async () => {
    const clock1 = new ManualClock(Date.now());
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha1', { clock: clock1, peerCheckAttempts: '2,3,4,5' }), server('alpha2'), server('beta')],
    });
    const alpha1 = net.servers[0]!;
    const alice = makeUser('alice', ['alpha1', 'alpha2']);
    const bob = makeUser('bob', ['beta']);
    await using a1 = await connectUser(alpha1.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, alice)).close();
    await (await connectUser(net.servers[2]!.wsUrl, bob)).close();
    const first = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, first)).deliveryState, 'delivered');
    await waitForRow(net.servers[1]!, first.outgoingKey, (r) => r.state === 'delivered');
    await net.stop(1);
    await net.stop(2);

    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, m)).deliveryState, 'accepted');
    const beta = await net.start(2);
    clock1.advance(400); // attempt 2: the status check on alpha2 fails, then beta is called
    await deliveryEvent(a1, m.outgoingKey, 'delivered');
    assert.deepEqual(
      [(await deliveryRow(alpha1, m.outgoingKey))!.attempt, await opCount(beta, 'ReceiveIncomingMessage')],
      [2, 1],
    );
  });

  it('the answer waits at most firstAttemptWaitMs; a later outcome arrives as DmDeliveryStateChanged; a call that never answers times out', async () => {
    await using slow = await startHoldingPeer('slowpoke');
    const key = slow.identity;
    const bob = makeUser('bob', ['slowpoke']);
    const dir = await mkdtemp(join(tmpdir(), 'shine-fed-'));
    const directoryFile = join(dir, 'directory.json');
    await writeFile(directoryFile, JSON.stringify({ servers: [key.descriptor], users: [bob.profile] }));
    try {
      await using net = await startNetwork({
        servers: [
          server('alpha', {
            directoryFile,
            firstAttemptWaitMs: 200,
            s2sTimeoutMs: 1500,
            retryScheduleMs: '0,2000,4000',
            peerCheckAttempts: '2,3',
          }),
        ],
      });
      const alpha = net.servers[0]!;
      const alice = makeUser('alice', ['alpha']);
      await using a = await connectUser(alpha.wsUrl, alice);

      // The recipient's server holds the call: the answer comes after the wait, still `accepted`.
      const m1 = textPair(alice, 'bob');
      const started = Date.now();
      assert.equal((await sendPair(a, m1)).deliveryState, 'accepted');
      assert.ok(Date.now() - started >= 190, 'the answer waited for the first attempt');
      await waitUntil(() => slow.held.length === 1, 5_000, 'the call reached the recipient server');
      assert.equal(slow.held[0]!.op, 'ReceiveIncomingMessage');
      assert.equal(slow.held[0]!.payload.incomingBlobB64, m1.incomingBlobB64);
      slow.held.shift()!.answer();
      await deliveryEvent(a, m1.outgoingKey, 'delivered');
      assert.deepEqual(
        [(await deliveryRow(alpha, m1.outgoingKey))!.state, (await deliveryRow(alpha, m1.outgoingKey))!.attempt],
        ['delivered', 1],
      );

      // A call that is never answered fails after s2sTimeoutMs (1.5 s); then slowpoke is not answering, and a
      // probe or the retry at 2 s delivers.
      const m2 = textPair(alice, 'bob');
      assert.equal((await sendPair(a, m2)).deliveryState, 'accepted');
      await waitUntil(
        async () => (await metric(alpha, 'shine_s2s_errors_total', { peer: 'slowpoke' })) === 1,
        5_000,
        'the call timed out',
      );
      assert.deepEqual(
        [(await deliveryRow(alpha, m2.outgoingKey))!.state, (await deliveryRow(alpha, m2.outgoingKey))!.attempt],
        ['accepted', 1],
      );
      slow.autoAnswer = true;
      // The probe (m2 again) or attempt 2 may have reached slowpoke already, before the flag flipped.
      for (const c of slow.held.splice(0)) c.answer();
      await deliveryEvent(a, m2.outgoingKey, 'delivered');
      // The probe's success wakes m2's row at once (an extra attempt: attempt 1), unless attempt 2 came first.
      assert.ok([1, 2].includes((await deliveryRow(alpha, m2.outgoingKey))!.attempt));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a newer revision restarts its own schedule, from `delivered` and from `failed`', async () => {
    await using net = await startNetwork({ federate: true, servers: [server('alpha'), server('beta')] });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob)).close();
    const original = textPair(alice, 'bob', { body: 'v0' });
    assert.equal((await sendPair(a, original)).deliveryState, 'delivered');
    await net.stop(1);

    // An edit of a delivered message while beta is down: a new row for the new revision, which fails.
    const edit1 = textPair(alice, 'bob', {
      timeMs: original.timeMs,
      nonce: original.nonce,
      revisionTimeMs: Date.now(),
      body: 'v1',
    });
    assert.equal(edit1.outgoingKey, original.outgoingKey);
    assert.equal((await sendPair(a, edit1)).deliveryState, 'accepted');
    const restarted = (await deliveryRow(alpha, edit1.outgoingKey))!;
    assert.deepEqual([restarted.state, restarted.revisionTimeMs], ['accepted', edit1.outgoing.revisionTimeMs]);
    assert.ok(restarted.attempt <= 2, 'a fresh schedule, not the delivered one');
    await deliveryEvent(a, edit1.outgoingKey, 'failed');

    // An edit of the failed revision: its schedule starts again and delivers it. (Its first attempt may
    // find alpha still backing off from beta's outage, so it is delivered by the first or second attempt.)
    const beta = await net.start(1);
    await using b = await connectUser(beta.wsUrl, bob);
    const edit2 = textPair(alice, 'bob', {
      timeMs: original.timeMs,
      nonce: original.nonce,
      revisionTimeMs: edit1.outgoing.revisionTimeMs + 1,
      body: 'v2',
    });
    const sentAt = Date.now();
    const answer = await sendPair(a, edit2);
    if (answer.deliveryState !== 'delivered') {
      assert.equal(answer.deliveryState, 'accepted');
      await deliveryEvent(a, edit2.outgoingKey, 'delivered');
    }
    const row = (await deliveryRow(alpha, edit2.outgoingKey))!;
    assert.equal(row.state, 'delivered');
    assert.equal(row.revisionTimeMs, edit2.outgoing.revisionTimeMs);
    assert.ok(row.acceptedAtMs >= sentAt, 'the schedule is anchored at the new revision');
    assert.ok(row.attempt <= 2, `delivered by attempt ${row.attempt} of the new schedule`);
    await directMessageEvent(b, edit2.incomingKey, edit2.outgoing.revisionTimeMs);
    const [item] = await history(b, 'alice');
    assert.equal(item?.revisionTimeMs, edit2.outgoing.revisionTimeMs);
    assert.equal(item?.blobB64, edit2.incomingBlobB64);
  });

  it('a recipient on this server and another: delivered at once, and the other server gets the copy too (with its event)', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', SLOW_SECOND_ATTEMPT), server('gamma')],
    });
    const [alpha, gamma] = [net.servers[0]!, net.servers[1]!];
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha', 'gamma']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(alpha.wsUrl, bob, 'desk')).close();
    await using bobG = await connectUser(gamma.wsUrl, bob, 'phone');
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'delivered', 'the local copy counts');
    await directMessageEvent(bobG, m.incomingKey);
    // The event leaves while gamma's ReceiveIncomingMessage is still being answered; the count follows.
    await waitUntil(async () => (await opCount(gamma, 'ReceiveIncomingMessage')) === 1, 10_000, 'gamma’s answer');
  });

  it('the first attempt follows a recipient who moved: a cached profile older than profileRefreshMs is refreshed before it', async () => {
    // No second attempt within the test: only the first attempt can deliver.
    const alphaSpec = server('alpha', { profileRefreshMs: 0, retryScheduleMs: '0,600000,1200000,1800000,3600000' });
    await using net = await startNetwork({ federate: true, servers: [alphaSpec, server('beta'), server('gamma')] });
    const [alpha, , gamma] = [net.servers[0]!, net.servers[1]!, net.servers[2]!];
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob)).close();
    assert.equal(
      (await sendPair(a, textPair(alice, 'bob'))).deliveryState,
      'delivered',
      'through beta; alpha now holds bob’s profile',
    );

    // bob moves to gamma; his old server is gone.
    bob.profile = profileFor(bob, { accessServers: ['gamma'], version: 2 });
    await using bobG = await connectUser(gamma.wsUrl, bob);
    await net.stop(1);
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'delivered', 'the first attempt went to gamma');
    await directMessageEvent(bobG, m.incomingKey);
    assert.deepEqual((await alpha.ctx.store.directory.getUser('bob'))?.profile.accessServers, ['gamma']);
  });

  it('imports an unknown recipient’s profile from its access server, and only from a server its profile lists', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha'), server('beta'), server('gamma')],
    });
    const [alpha, beta, gamma] = [net.servers[0]!, net.servers[1]!, net.servers[2]!];
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    const dave = makeUser('dave', ['beta']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await using b = await connectUser(beta.wsUrl, bob);
    await (await connectUser(beta.wsUrl, dave)).close();

    assert.equal(await alpha.ctx.store.directory.getUser('bob'), null, 'alpha has never seen bob');
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m)).deliveryState, 'delivered');
    await directMessageEvent(b, m.incomingKey);
    const imported = await alpha.ctx.store.directory.getUser('bob');
    assert.equal(imported?.source, 'imported');
    assert.deepEqual(imported?.profile, bob.profile);

    // An anonymous socket never makes gamma ask other servers; a logged-in user's request does.
    await using anonymous = await connectRaw(gamma.wsUrl);
    const notImported = await anonymous.request('GetUserProfile', { login: 'dave' });
    assert.equal(!notImported.ok && notImported.error.code, 'USER_NOT_FOUND');
    assert.equal(await gamma.ctx.store.directory.getUser('dave'), null);
    // gamma learns dave's genuine profile; with beta down it is the only server that can answer for dave.
    await using g = await connectUser(gamma.wsUrl, makeUser('gina', ['gamma']));
    assert.deepEqual((await g.call<{ profile: unknown }>('GetUserProfile', { login: 'dave' })).profile, dave.profile);
    await net.stop(1);
    const asked = await opCount(gamma, 'GetUserProfile');
    const toDave = textPair(alice, 'dave');
    const refused = await a.request('SendMessagePair', {
      incomingBlobB64: toDave.incomingBlobB64,
      outgoingBlobB64: toDave.outgoingBlobB64,
    });
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.error.code, 'USER_NOT_FOUND');
    assert.equal(
      await opCount(gamma, 'GetUserProfile'),
      asked + 1,
      'alpha asked gamma, and refused its answer: gamma is not in dave’s accessServers',
    );
    assert.equal(await alpha.ctx.store.directory.getUser('dave'), null);
    assert.equal(await alpha.ctx.store.messages.getCopy(toDave.outgoingKey), null, 'nothing stored');
    assert.equal(await deliveryRow(alpha, toDave.outgoingKey), null);
  });
});
