/**
 * Calls (docs/protocol.md §5.6) against real servers on loopback: invites and every signal kind on one server and
 * across servers with ServerAuth on, the sender's own other devices, the `call` push to a callee
 * without a session, who may ring whom (ReceiveCallSignal), and the refusals — each shown to deliver
 * nothing and to leave the sessions, the limits and the other users as they were.
 *
 * Absence is shown without sleeping: events for one socket arrive in the order the server sent them,
 * so once a later event has arrived, an earlier one that never came was never sent.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import WebSocket from 'ws';
import { ShineClient, createIdentity, makeProfile } from '../../src/client/index.js';
import type { CallDelivery, CallInviteEvent, CallSignalEvent, CallSignalKind } from '../../src/protocol/ops.js';
import { CALL_SIGNAL_KINDS, MAX_CALL_PAYLOAD } from '../../src/protocol/ops.js';
import type { CallPush } from '../../src/server/calls/service.js';
import { CALL_LIMITS } from '../../src/server/calls/service.js';
import { ManualClock } from '../../src/server/clock.js';
import { assertError } from '../helpers/assert.js';
import { FAST, fakeServer, serverSession } from '../helpers/federation.js';
import type { NetworkServerSpec } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { assertSessionWorks, connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { suiteConcurrency } from '../helpers/test-db.js';

const server = (serverLogin: string, extra: NetworkServerSpec = {}): NetworkServerSpec => ({
  serverLogin,
  ...FAST,
  ...extra,
});

const b64 = (text: string): string => Buffer.from(text).toString('base64');
const ECHOED: readonly CallSignalKind[] = ['answer', 'reject', 'hangup'];

/** The call events a session received for callId, as `kind:fromLogin:payload` (kind `invite` for CallInvite). */
function callLog(client: RawClient, callId: string): string[] {
  return client.events
    .filter((e) => (e.op === 'CallInvite' || e.op === 'CallSignal') && (e.payload as CallSignalEvent).callId === callId)
    .map((e) => {
      const p = e.payload as CallSignalEvent;
      return `${e.op === 'CallInvite' ? 'invite' : p.kind}:${p.fromLogin}:${p.payloadB64}`;
    });
}

/** Waits until the session has received `n` call events for callId. */
function waitForCallEvents(client: RawClient, callId: string, n: number): Promise<void> {
  return waitUntil(() => callLog(client, callId).length >= n, 10_000, `${n} call events for ${callId}`);
}

const invite = (client: RawClient, toLogin: string, callId: string, payloadB64 = b64(`offer ${callId}`)) =>
  client.request<CallDelivery>('CallInviteBroadcast', { toLogin, callId, payloadB64 });

const signal = (client: RawClient, toLogin: string, callId: string, kind: string, payloadB64 = b64(kind)) =>
  client.request<{ deliveredWsSessions: number }>('CallSignal', { toLogin, callId, kind, payloadB64 });

/** A CallPush that records whom it would wake and reports one push each time. */
function recordingPush(): CallPush & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    notifyCall(owner, fromLogin, callId) {
      calls.push(`${owner}<-${fromLogin}:${callId}`);
      return 1;
    },
  };
}

/** The log a session should have: events as `kind:fromLogin:payload` for the given kinds. */
const expected = (fromLogin: string, kinds: readonly string[]): string[] =>
  kinds.map((k) => `${k}:${fromLogin}:${k === 'invite' ? b64('offer call-1') : b64(k)}`);

/**
 * Alice (session a) rings bob, bob (session b) sends every signal kind back (answers, trickles ICE, …),
 * then alice every kind; each reaches two sessions of the other side, as the answers count.
 */
async function playCall(a: RawClient, b: RawClient): Promise<void> {
  const rang = await invite(a, 'bob', 'call-1');
  assert.deepEqual(rang.ok && rang.payload, { deliveredWsSessions: 2, deliveredWebPushSessions: 0 });
  for (const [from, toLogin] of [
    [b, 'alice'],
    [a, 'bob'],
  ] as const) {
    for (const kind of CALL_SIGNAL_KINDS) {
      const sent = await signal(from, toLogin, 'call-1', kind);
      assert.deepEqual(sent.ok && sent.payload, { deliveredWsSessions: 2 }, `${kind} reached ${toLogin}'s sessions`);
    }
  }
}

describe('calls (docs/protocol.md §5.6)', { concurrency: suiteConcurrency() }, () => {
  it('one server: an invite rings every session of the callee; every signal kind reaches the other side; the sender’s other sessions see answer, reject and hangup; the sending session no echo', async () => {
    await using net = await startNetwork({ servers: [server('alpha')] });
    const { wsUrl } = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    await using a1 = await connectUser(wsUrl, alice, 'laptop');
    await using a2 = await connectUser(wsUrl, alice, 'phone');
    await using b1 = await connectUser(wsUrl, bob, 'laptop');
    await using b2 = await connectUser(wsUrl, bob, 'phone');

    await playCall(a1, b1);
    // Barriers: one last event for each session, sent after everything above.
    await signal(b2, 'alice', 'barrier', 'ice');
    await signal(a2, 'bob', 'barrier', 'ice');
    await Promise.all([a1, a2, b1, b2].map((c) => waitForCallEvents(c, 'barrier', 1)));

    assert.deepEqual(callLog(b1, 'call-1'), [
      ...expected('alice', ['invite']),
      ...expected('alice', CALL_SIGNAL_KINDS),
    ]);
    assert.deepEqual(callLog(b2, 'call-1'), [
      ...expected('alice', ['invite']),
      ...expected('bob', ECHOED),
      ...expected('alice', CALL_SIGNAL_KINDS),
    ]);
    assert.deepEqual(callLog(a1, 'call-1'), expected('bob', CALL_SIGNAL_KINDS), 'no echo of its own signals');
    assert.deepEqual(callLog(a2, 'call-1'), [...expected('bob', CALL_SIGNAL_KINDS), ...expected('alice', ECHOED)]);
    // The events carry exactly the protocol's fields.
    const first = b1.events.find((e) => e.op === 'CallInvite')!;
    assert.deepEqual(first.payload, { fromLogin: 'alice', callId: 'call-1', payloadB64: b64('offer call-1') });
    const answer = a1.events.find((e) => e.op === 'CallSignal')!;
    assert.deepEqual(answer.payload, { fromLogin: 'bob', callId: 'call-1', kind: 'answer', payloadB64: b64('answer') });
    // Nothing of a call is stored: no conversation, no history.
    assert.deepEqual((await b1.call<{ items: unknown[] }>('GetConversations', {})).items, []);
  });

  it('across servers (ServerAuth on): the callee rings on both its access servers; signals come back; the callee’s answer stops its device on its other server', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha'), server('beta1'), server('beta2')],
    });
    const [alpha, beta1, beta2] = [net.servers[0]!, net.servers[1]!, net.servers[2]!];
    assert.equal(alpha.config.s2sAuth, 'required');
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta1', 'beta2']);
    await using a1 = await connectUser(alpha.wsUrl, alice, 'laptop');
    await using a2 = await connectUser(alpha.wsUrl, alice, 'phone');
    await using b1 = await connectUser(beta1.wsUrl, bob, 'laptop');
    await using b2 = await connectUser(beta2.wsUrl, bob, 'phone');

    await playCall(a1, b1);
    // The echo of bob's signals to his phone on beta2 is not waited for by the answer: wait for it here,
    // then for a barrier echo sent after them all over the same path.
    await signal(b1, 'alice', 'barrier', 'hangup');
    await Promise.all([waitForCallEvents(b2, 'barrier', 1), waitForCallEvents(b2, 'call-1', 1 + 3 + 6)]);
    await Promise.all([a1, a2].map((c) => waitForCallEvents(c, 'barrier', 1)));

    assert.deepEqual(callLog(b1, 'call-1'), [
      ...expected('alice', ['invite']),
      ...expected('alice', CALL_SIGNAL_KINDS),
    ]);
    assert.deepEqual(
      callLog(b2, 'call-1').sort(),
      [...expected('alice', ['invite']), ...expected('bob', ECHOED), ...expected('alice', CALL_SIGNAL_KINDS)].sort(),
    );
    assert.deepEqual(callLog(a1, 'call-1'), expected('bob', CALL_SIGNAL_KINDS));
    assert.deepEqual(callLog(a2, 'call-1'), [...expected('bob', CALL_SIGNAL_KINDS), ...expected('alice', ECHOED)]);
  });

  it('an invite does not wait for a callee’s server that is backing off: answered with the count of the one that is up', async () => {
    // alpha's clock moves by hand: its redial of beta2 (and the 5 s answer wait) come only when the test says.
    const clock = new ManualClock(Date.now());
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', { clock }), server('beta1'), server('beta2')],
    });
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta1', 'beta2']);
    await using a = await connectUser(net.servers[0]!.wsUrl, alice);
    await using b1 = await connectUser(net.servers[1]!.wsUrl, bob, 'laptop');
    await (await connectUser(net.servers[2]!.wsUrl, bob, 'phone')).close();
    const both = await invite(a, 'bob', 'call-1');
    assert.deepEqual(both.ok && both.payload, { deliveredWsSessions: 1, deliveredWebPushSessions: 0 });
    await net.stop(2);
    // beta2's socket closed: the next call dials, is refused, and alpha backs off.
    const refused = await invite(a, 'bob', 'call-2');
    assert.deepEqual(refused.ok && refused.payload, { deliveredWsSessions: 1, deliveredWebPushSessions: 0 });

    const answer = await invite(a, 'bob', 'call-3').finally(() => clock.advance(5000));
    assert.deepEqual(answer.ok && answer.payload, { deliveredWsSessions: 1, deliveredWebPushSessions: 0 });
    await waitForCallEvents(b1, 'call-3', 1);
  });

  it('a callee without a session: the invite asks for a `call` push (here and on the callee’s server) and counts it; signals push nothing', async () => {
    const alphaPush = recordingPush();
    const betaPush = recordingPush();
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', { callPush: alphaPush }), server('beta', { callPush: betaPush })],
    });
    const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
    const alice = makeUser('alice', ['alpha']);
    const carol = makeUser('carol', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(alpha.wsUrl, carol)).close();
    await (await connectUser(beta.wsUrl, bob)).close();

    const local = await invite(a, 'carol', 'call-1');
    assert.deepEqual(local.ok && local.payload, { deliveredWsSessions: 0, deliveredWebPushSessions: 1 });
    assert.deepEqual(alphaPush.calls, ['carol<-alice:call-1']);

    const remote = await invite(a, 'bob', 'call-2');
    assert.deepEqual(remote.ok && remote.payload, { deliveredWsSessions: 0, deliveredWebPushSessions: 1 });
    assert.deepEqual(betaPush.calls, ['bob<-alice:call-2'], "bob's own server wakes his devices");
    assert.deepEqual(alphaPush.calls, ['carol<-alice:call-1'], 'alpha pushes only for its own users');

    assert.equal((await signal(a, 'carol', 'call-1', 'cancel')).ok, true);
    assert.equal((await signal(a, 'bob', 'call-2', 'cancel')).ok, true);
    assert.deepEqual(alphaPush.calls, ['carol<-alice:call-1']);
    assert.deepEqual(betaPush.calls, ['bob<-alice:call-2']);
  });

  it('ReceiveCallSignal: a server rings only for its own users (403 NOT_SENDER) and only users it serves (403 LOCAL_SERVER_NOT_ACCESS_SERVER)', async () => {
    // gamma is a server whose key the test holds, known to beta from its directory file; carol is gamma's user.
    const gamma = fakeServer('gamma');
    const carol = makeUser('carol', ['gamma']);
    const dir = await mkdtemp(join(tmpdir(), 'shine-calls-'));
    try {
      const directoryFile = join(dir, 'directory.json');
      await writeFile(directoryFile, JSON.stringify({ servers: [gamma.descriptor], users: [carol.profile] }));
      await using net = await startNetwork({
        federate: true,
        servers: [server('alpha'), server('beta', { directoryFile })],
      });
      const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
      const alice = makeUser('alice', ['alpha']);
      const bob = makeUser('bob', ['beta']);
      await (await connectUser(alpha.wsUrl, alice)).close();
      await using b = await connectUser(beta.wsUrl, bob);
      await using g = await serverSession(beta, gamma);
      const ring = (extra: Record<string, unknown>) =>
        g.request('ReceiveCallSignal', {
          fromLogin: 'carol',
          toLogin: 'bob',
          callId: 'call-1',
          kind: 'invite',
          payloadB64: b64('offer'),
          ...extra,
        });

      // alice is alpha's user, not gamma's: gamma cannot ring for her.
      assertError(await ring({ fromLogin: 'alice' }), 403, 'NOT_SENDER', { op: 'ReceiveCallSignal' });
      assertError(await ring({ fromLogin: 'alice', kind: 'hangup' }), 403, 'NOT_SENDER');
      // beta does not serve alice, nor a login nobody knows.
      assertError(await ring({ toLogin: 'alice' }), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
      assertError(await ring({ toLogin: 'nobody' }), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
      // The session is gamma's: a claim to be another server is refused.
      assertError(await ring({ sourceServerLogin: 'alpha' }), 403, 'SOURCE_MISMATCH');
      // Fields and size as for the client ops.
      assertError(await ring({ kind: 'ring' }), 400, 'BAD_FIELDS');
      assertError(await ring({ callId: '' }), 400, 'BAD_FIELDS');
      assertError(await ring({ payloadB64: Buffer.alloc(MAX_CALL_PAYLOAD + 1).toString('base64') }), 413, 'TOO_LARGE');
      // Not a server session at all.
      assertError(
        await b.request('ReceiveCallSignal', {
          fromLogin: 'carol',
          toLogin: 'bob',
          callId: 'x',
          kind: 'invite',
          payloadB64: '',
        }),
        401,
        'NOT_AUTHENTICATED',
      );

      // gamma ringing for its own user works, and is the first call event bob sees.
      const ok = await ring({});
      assert.deepEqual(ok.ok && ok.payload, { deliveredWsSessions: 1, deliveredWebPushSessions: 0 });
      await waitForCallEvents(b, 'call-1', 1);
      assert.deepEqual(callLog(b, 'call-1'), [`invite:carol:${b64('offer')}`]);
      await assertSessionWorks(b);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('bad callId, kind or payload → 400 BAD_FIELDS; over 16 KiB → 413 TOO_LARGE; unknown callee → 404: nothing rings, nothing counts against the limit', async () => {
    const push = recordingPush();
    await using net = await startNetwork({ servers: [server('alpha', { callPush: push })] });
    const { wsUrl } = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    await using a = await connectUser(wsUrl, alice);
    await using b = await connectUser(wsUrl, bob);
    const largest = Buffer.alloc(MAX_CALL_PAYLOAD, 7).toString('base64');
    const tooLarge = Buffer.alloc(MAX_CALL_PAYLOAD + 1, 7).toString('base64');

    const refusals: [Promise<object>, number, string][] = [];
    // More refused invites than the limit allows accepted ones: none of them may use it up.
    for (let i = 0; i < CALL_LIMITS.invite.burst; i++) {
      refusals.push(
        [invite(a, 'bob', ''), 400, 'BAD_FIELDS'],
        [invite(a, 'bob', 'x'.repeat(65)), 400, 'BAD_FIELDS'],
        [invite(a, 'bob', 'call 1'), 400, 'BAD_FIELDS'],
        [invite(a, 'bob', 'call-ü'), 400, 'BAD_FIELDS'],
        [invite(a, 'bob', 'call-1', 'not base64!'), 400, 'BAD_FIELDS'],
        [invite(a, 'alice', 'call-1'), 400, 'BAD_FIELDS'],
        [a.request('CallInviteBroadcast', { toLogin: 'bob', callId: 'call-1' }), 400, 'BAD_FIELDS'],
        [invite(a, 'bob', 'call-1', tooLarge), 413, 'TOO_LARGE'],
        [signal(a, 'bob', 'call-1', 'invite'), 400, 'BAD_FIELDS'],
        [signal(a, 'bob', 'call-1', 'ring'), 400, 'BAD_FIELDS'],
        [signal(a, 'bob', 'call-1', 'answer', tooLarge), 413, 'TOO_LARGE'],
      );
    }
    for (const [answer, status, code] of refusals) assertError(await answer, status, code);
    // An unknown callee is looked for (and counted): the last refusal.
    assertError(await invite(a, 'nobody', 'call-1'), 404, 'USER_NOT_FOUND');
    assertError(await signal(a, 'nobody', 'call-1', 'hangup'), 404, 'USER_NOT_FOUND');
    assert.deepEqual(push.calls, [], 'no push for a refused invite');
    assert.equal(callLog(b, 'call-1').length, 0);

    // Then the largest payload goes through, and the invite limit is all there minus the 404.
    const big = await invite(a, 'bob', 'call-2', largest);
    assert.deepEqual(big.ok && big.payload, { deliveredWsSessions: 1, deliveredWebPushSessions: 1 });
    for (let i = 2; i < CALL_LIMITS.invite.burst; i++) assert.equal((await invite(a, 'bob', `call-${i + 1}`)).ok, true);
    await waitForCallEvents(b, 'call-2', 1);
    assert.equal(b.events.filter((e) => e.op === 'CallInvite').length, CALL_LIMITS.invite.burst - 1);
    assert.deepEqual(callLog(b, 'call-1'), [], 'the refused ones rang nothing');
    assert.equal(callLog(b, 'call-2')[0], `invite:alice:${largest}`);
    await assertSessionWorks(a);
    await assertSessionWorks(b);
  });

  it('per sending login: 30 invites and 600 signals a minute (429 RATE_LIMITED), on the injected clock; other users and the other kind unaffected', async () => {
    const clock = new ManualClock(Date.now());
    // The per-connection limit (which the hand-moved clock never refills) is not what this test is about.
    const rateLimit = { perSecond: 10_000, burst: 10_000 };
    await using net = await startNetwork({ servers: [server('alpha', { clock, rateLimit })] });
    const { wsUrl } = net.servers[0]!;
    const [alice, bob, carol] = [
      makeUser('alice', ['alpha']),
      makeUser('bob', ['alpha']),
      makeUser('carol', ['alpha']),
    ];
    await using a = await connectUser(wsUrl, alice);
    await using b = await connectUser(wsUrl, bob);
    await using c = await connectUser(wsUrl, carol);

    const invites = await Promise.all(Array.from({ length: 30 }, (_, i) => invite(a, 'bob', `call-${i}`)));
    assert.ok(invites.every((r) => r.ok));
    assertError(await invite(a, 'bob', 'call-30'), 429, 'RATE_LIMITED', { op: 'CallInviteBroadcast' });
    assert.equal((await invite(c, 'bob', 'carol-1')).ok, true, 'the limit is per sending login');
    assert.equal((await signal(a, 'bob', 'call-0', 'cancel')).ok, true, 'signals have their own limit');
    await waitForCallEvents(b, 'call-0', 2);
    assert.deepEqual(callLog(b, 'call-30'), [], 'the refused invite rang nothing');
    assert.equal(b.events.filter((e) => e.op === 'CallInvite').length, 31);

    // Half a token a second: two seconds later, one invite more and no second one.
    clock.advance(1999);
    assertError(await invite(a, 'bob', 'call-30'), 429, 'RATE_LIMITED');
    clock.advance(1);
    assert.equal((await invite(a, 'bob', 'call-30')).ok, true);
    assertError(await invite(a, 'bob', 'call-31'), 429, 'RATE_LIMITED');

    // The signal bucket (one used above) filled up again while the clock moved: 600 signals, then no more.
    const signals = await Promise.all(Array.from({ length: 600 }, () => signal(a, 'bob', 'call-0', 'ice')));
    assert.ok(signals.every((r) => r.ok));
    assertError(await signal(a, 'bob', 'call-0', 'hangup'), 429, 'RATE_LIMITED', { op: 'CallSignal' });
    assert.equal((await signal(c, 'bob', 'carol-1', 'hangup')).ok, true, 'carol still signals');
    clock.advance(100);
    assert.equal((await signal(a, 'bob', 'call-0', 'hangup')).ok, true, 'ten signals a second come back');
    await waitForCallEvents(b, 'call-0', 1 + 1 + 600 + 1);
    assert.equal(callLog(b, 'call-0').filter((e) => e.startsWith('hangup:')).length, 1);
    await assertSessionWorks(a);
  });

  it('SDK: callInvite and callSignal, with the CallInvite and CallSignal events typed', async () => {
    await using net = await startNetwork({ servers: [server('alpha')] });
    const { wsUrl } = net.servers[0]!;
    const [alice, bob] = [createIdentity('alice'), createIdentity('bob')];
    await using ca = await ShineClient.connect(wsUrl, { WebSocket: WebSocket as never });
    await using cb = await ShineClient.connect(wsUrl, { WebSocket: WebSocket as never });
    await ca.register(makeProfile(alice, ['alpha'], 1, Date.now()));
    await cb.register(makeProfile(bob, ['alpha'], 1, Date.now()));
    await ca.login(alice, 'laptop');
    await cb.login(bob, 'phone');
    const rung = new Promise<CallInviteEvent>((resolve) => cb.on('CallInvite', resolve));
    const answered = new Promise<CallSignalEvent>((resolve) => ca.on('CallSignal', resolve));

    assert.deepEqual(await ca.callInvite('bob', 'sdk-call', b64('offer')), {
      deliveredWsSessions: 1,
      deliveredWebPushSessions: 0,
    });
    assert.deepEqual(await rung, { fromLogin: 'alice', callId: 'sdk-call', payloadB64: b64('offer') });
    assert.deepEqual(await cb.callSignal('alice', 'sdk-call', 'answer', b64('sdp')), { deliveredWsSessions: 1 });
    assert.deepEqual(await answered, { fromLogin: 'bob', callId: 'sdk-call', kind: 'answer', payloadB64: b64('sdp') });
    await assert.rejects(ca.callSignal('bob', 'sdk-call', 'hangup', '%%%%'), { code: 'BAD_FIELDS', status: 400 });

    // Payloads sealed for the other side: the server relays bytes that show no address.
    const offer = new TextEncoder().encode('v=0 IN IP4 192.0.2.7');
    const sealed = await ca.sealCallPayload('bob', 'sdk-call-2', offer);
    assert.ok(!Buffer.from(sealed, 'base64').includes(Buffer.from('192.0.2.7')), 'no address in the sealed payload');
    const rungAgain = new Promise<CallInviteEvent>((resolve) => cb.on('CallInvite', resolve));
    await ca.callInvite('bob', 'sdk-call-2', sealed);
    const got = await rungAgain;
    assert.deepEqual(cb.openCallPayload(got.fromLogin, got.callId, got.payloadB64), offer);
    assert.equal(cb.openCallPayload('alice', 'another-call', got.payloadB64), null, 'bound to its call');
    assert.equal(cb.openCallPayload('carol', 'sdk-call-2', got.payloadB64), null, 'bound to its sender');
    assert.equal(ca.openCallPayload('alice', 'sdk-call-2', got.payloadB64), null, 'only the callee opens it');
    assert.equal(cb.openCallPayload('alice', 'sdk-call-2', b64('offer')), null, 'plain bytes are not a sealed payload');
  });
});
