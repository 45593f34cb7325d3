/**
 * Direct messages against a real server (docs/protocol.md §3, §5.2, §5.3): every error of the pair ops in the
 * the protocol's order, the message life cycle through the SDK, replay after reconnect, history paging and
 * settings.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import type { BuiltPair, Identity, MessageRef, PairSender } from '../../src/client/index.js';
import {
  ShineClient,
  createIdentity,
  deleteConversationPair,
  deleteMessagePair,
  makeProfile,
  textPair,
} from '../../src/client/index.js';
import { concatBytes, toBase64, utf8 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import {
  MAX_BODY,
  MAX_CONTAINER,
  baseKeyOf,
  copyFieldsOf,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  messageKeyOf,
} from '../../src/protocol/container.js';
import type { DirectMessageEvent, OpResults, PairAnswer } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import { ManualClock } from '../../src/server/clock.js';
import type { PairOp } from '../../src/server/dm/service.js';
import { assertError } from '../helpers/assert.js';
import type { PairSpec } from '../helpers/containers.js';
import { seedOf, testPair } from '../helpers/containers.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import type { TestUser } from '../helpers/users.js';
import { assertSessionWorks, connectUser, login, makeUser } from '../helpers/users.js';
import { queryTestDb } from '../helpers/test-db.js';
import { waitUntil } from '../helpers/wait.js';

const PAIR_OPS: readonly PairOp[] = ['SendMessagePair', 'DeleteMessage', 'DeleteConversation'];
const SKEW_MS = 300_000;

type Pair = { incoming: Container; outgoing: Container };

const blobs = (p: Pair) => ({
  incomingBlobB64: toBase64(p.incoming.bytes),
  outgoingBlobB64: toBase64(p.outgoing.bytes),
});

/** A user of server alpha whose key is the containers helper's, so testPair signs as them. */
const pairUser = (name: string): TestUser => makeUser(name, ['alpha'], seedOf(name));

/** The DirectMessage events a raw session has received (from index `from` of its events). */
const directMessages = (c: RawClient, from = 0): DirectMessageEvent[] =>
  c.events
    .slice(from)
    .filter((e) => e.op === 'DirectMessage')
    .map((e) => e.payload as DirectMessageEvent);

/** The event the owner of copy c gets for it. */
function eventOf(c: Container, storedAtMs: number): DirectMessageEvent {
  return { ...copyFieldsOf(c), storedAtMs, blobB64: toBase64(c.bytes) };
}

const deleteBody = (targetTimeMs: number, targetNonce: number, targetSender: 0 | 1 = 0) =>
  encodeDeleteMessageBody({ targetTimeMs, targetNonce, targetSender });
const clearBody = (deleteBeforeMs: number) => encodeDeleteConversationBody({ deleteBeforeMs });

/**
 * A barrier after AuthLogin: this write queues behind the login's device touch, so by its answer any
 * replay of the device is already on the socket, ahead of the answer.
 */
const settled = (c: RawClient) => c.call<OpResults['AckSessionDelivery']>('AckSessionDelivery', { messageKeys: [] });

describe('dm: pair operation errors, in the order of docs/protocol.md §5.2', () => {
  const clock = new ManualClock();
  const T = clock.now() - 60_000;
  const aliceUser = pairUser('alice');
  const bobUser = pairUser('bob');
  let net: TestNetwork;
  let server: RunningServer;
  let alice: RawClient;
  let aliceOther: RawClient;
  let bob: RawClient;
  let bystander: RawClient;
  let nonce = 1000;

  /** alice → bob text, stored before every case: a stored delete in any case would remove it. */
  const baseline = testPair({ from: 'alice', to: 'bob', timeMs: T, nonce: 1 });

  /** A valid pair of the op's types that would visibly change the alice–bob dialog if it were stored. */
  function validPair(op: PairOp, spec: Partial<PairSpec> = {}): Pair {
    const common = { from: 'alice', to: 'bob', timeMs: T + 10, nonce: nonce++, ...spec };
    switch (op) {
      case 'SendMessagePair':
        return testPair({ type: 1, ...common });
      case 'DeleteMessage':
        // Names the baseline, whichever side signs it.
        return testPair({ type: 5, body: deleteBody(T, 1, common.from === 'alice' ? 0 : 1), ...common });
      case 'DeleteConversation':
        return testPair({ type: 7, body: clearBody(T), ...common });
    }
  }

  /** Everything either user can see of the dialog. */
  async function dmState(): Promise<unknown> {
    const view = async (c: RawClient, peerLogin: string) => ({
      history: await c.call('GetDirectMessages', { peerLogin, limit: 200 }),
      conversations: await c.call('GetConversations', {}),
    });
    return { alice: await view(aliceOther, 'bob'), bob: await view(bob, 'alice') };
  }

  /**
   * Sends the request and asserts the exact error, that nothing was stored (both users' views, and
   * the copies of `pairs` by key), that no DirectMessage reached bob or alice's other session, and
   * that every other session still works.
   */
  async function expectRejected(
    op: string,
    payload: object,
    status: number,
    code: string,
    opts: { from?: RawClient; pairs?: Pair[] } = {},
  ): Promise<void> {
    const from = opts.from ?? alice;
    const state = await dmState();
    const seenBob = bob.events.length;
    const seenOther = aliceOther.events.length;
    assertError(await from.request(op, payload), status, code, { op });
    // Round trips on the observers' sockets: an event published before the answer above would be
    // queued on their sockets ahead of these answers.
    await assertSessionWorks(bob);
    await assertSessionWorks(aliceOther);
    await assertSessionWorks(bystander);
    assert.deepEqual(directMessages(bob, seenBob), [], `${code}: bob got an event`);
    assert.deepEqual(directMessages(aliceOther, seenOther), [], `${code}: alice's other session got an event`);
    assert.deepEqual(await dmState(), state, `${code}: the dialog changed`);
    for (const p of opts.pairs ?? []) {
      for (const c of [p.incoming, p.outgoing])
        assert.equal(await server.ctx.store.messages.getCopy(messageKeyOf(c)), null, `${messageKeyOf(c)} was stored`);
    }
    if (from === alice) await assertSessionWorks(alice);
  }

  before(async () => {
    // The manual clock never refills the per-connection token bucket; these tests send many requests.
    net = await startNetwork({
      clock,
      servers: [{ serverLogin: 'alpha', rateLimit: { perSecond: 1, burst: 100_000 } }],
    });
    server = net.servers[0]!;
    const url = server.wsUrl;
    bystander = await connectUser(url, makeUser('bystander', ['alpha']));
    alice = await connectUser(url, aliceUser, 'laptop');
    aliceOther = await connectUser(url, aliceUser, 'tablet');
    bob = await connectUser(url, bobUser, 'phone');
    await alice.call('RegisterUser', { profile: pairUser('carol').profile });
    const answer = await alice.call<PairAnswer>('SendMessagePair', blobs(baseline));
    assert.equal(answer.deliveredWsSessions, 1);
    await bob.waitFor((f) => f.op === 'DirectMessage');
  });
  after(async () => {
    for (const c of [alice, aliceOther, bob, bystander]) await c?.close();
    await net?.close();
  });

  it('NOT_AUTHENTICATED (401) before AuthLogin, checked before the payload', async () => {
    await using anon = await connectRaw(server.wsUrl);
    for (const op of PAIR_OPS) {
      const p = validPair(op);
      await expectRejected(op, blobs(p), 401, 'NOT_AUTHENTICATED', { from: anon, pairs: [p] });
    }
    await anon.call('AuthChallenge');
    await expectRejected('SendMessagePair', {}, 401, 'NOT_AUTHENTICATED', { from: anon });
    // The same socket, once logged in, may send the very pair it was refused.
    assert.equal((await login(anon, aliceUser, 'late')).status, 200);
    const p = validPair('SendMessagePair', { to: 'carol' });
    assert.equal((await anon.request('SendMessagePair', blobs(p))).status, 200);
  });

  it('BAD_FIELDS (400): a missing or empty blob, before any size check', async () => {
    for (const op of PAIR_OPS) {
      const p = validPair(op);
      const { incomingBlobB64, outgoingBlobB64 } = blobs(p);
      const payloads: object[] = [
        {},
        { incomingBlobB64 },
        { outgoingBlobB64 },
        { incomingBlobB64: '', outgoingBlobB64 },
        { incomingBlobB64, outgoingBlobB64: '' },
        { incomingBlobB64, outgoingBlobB64: 42 },
        { incomingBlobB64: '', outgoingBlobB64: 'A'.repeat(200_000) },
      ];
      for (const payload of payloads) await expectRejected(op, payload, 400, 'BAD_FIELDS', { pairs: [p] });
    }
  });

  it('TOO_LARGE (413): a container over 65 792 bytes, checked for both copies before decoding', async () => {
    assert.equal(MAX_CONTAINER, 65_792);
    const oversize = toBase64(new Uint8Array(MAX_CONTAINER + 1));
    for (const op of PAIR_OPS) {
      const p = validPair(op);
      const { incomingBlobB64, outgoingBlobB64 } = blobs(p);
      await expectRejected(op, { incomingBlobB64: oversize, outgoingBlobB64 }, 413, 'TOO_LARGE', { pairs: [p] });
      await expectRejected(op, { incomingBlobB64, outgoingBlobB64: oversize }, 413, 'TOO_LARGE', { pairs: [p] });
      // A valid container padded past the limit is too large, not merely trailing bytes.
      const padded = toBase64(
        concatBytes([p.incoming.bytes, new Uint8Array(MAX_CONTAINER + 1 - p.incoming.bytes.length)]),
      );
      await expectRejected(op, { incomingBlobB64: padded, outgoingBlobB64 }, 413, 'TOO_LARGE', { pairs: [p] });
    }
    const p = validPair('SendMessagePair');
    // Size before base64: a long run of non-base64 characters, or a bad incoming beside a big outgoing.
    await expectRejected(
      'SendMessagePair',
      { incomingBlobB64: '!'.repeat(90_000), outgoingBlobB64: blobs(p).outgoingBlobB64 },
      413,
      'TOO_LARGE',
    );
    await expectRejected('SendMessagePair', { incomingBlobB64: '%%%%', outgoingBlobB64: oversize }, 413, 'TOO_LARGE');
    // The limit is exact: 65 792 bytes pass the size check (these zeros then fail to decode)…
    await expectRejected(
      'SendMessagePair',
      { incomingBlobB64: toBase64(new Uint8Array(MAX_CONTAINER)), outgoingBlobB64: blobs(p).outgoingBlobB64 },
      400,
      'BAD_BLOB',
    );
    // …and the largest body is accepted.
    const biggest = testPair({
      from: 'alice',
      to: 'carol',
      timeMs: T,
      nonce: nonce++,
      body: new Uint8Array(MAX_BODY).fill(7),
    });
    assert.equal((await alice.request('SendMessagePair', blobs(biggest))).status, 200);
  });

  it('BAD_BLOB (400): bad base64, or bytes that do not decode — before pair consistency', async () => {
    const mutated = (c: Container, edit: (b: Uint8Array) => Uint8Array) => toBase64(edit(c.bytes.slice()));
    const setByte = (c: Container, at: number, v: number) =>
      mutated(c, (b) => {
        b[at] = v;
        return b;
      });
    for (const op of PAIR_OPS) {
      const p = validPair(op);
      const { incomingBlobB64, outgoingBlobB64 } = blobs(p);
      const badIncoming = [
        'not base64!',
        'AAA',
        'AB==', // non-canonical trailing bits
        ' AAAAAAA',
        incomingBlobB64.replace(/=+$/, ''),
        toBase64(new Uint8Array(100).fill(0x41)),
        setByte(p.incoming, 0, 0x54), // magic
        setByte(p.incoming, 8, 2), // formatVersion
        setByte(p.incoming, 9, 9), // messageType
        mutated(p.incoming, (b) => b.subarray(0, b.length - 1)), // truncated signature
        mutated(p.incoming, (b) => concatBytes([b, new Uint8Array([0])])), // trailing byte
      ];
      for (const bad of badIncoming) {
        if (bad === incomingBlobB64) continue; // a pair whose base64 needs no padding
        await expectRejected(op, { incomingBlobB64: bad, outgoingBlobB64 }, 400, 'BAD_BLOB', { pairs: [p] });
      }
      await expectRejected(op, { incomingBlobB64, outgoingBlobB64: 'not base64!' }, 400, 'BAD_BLOB', { pairs: [p] });
      await expectRejected(
        op,
        { incomingBlobB64, outgoingBlobB64: mutated(p.outgoing, (b) => b.subarray(0, 40)) },
        400,
        'BAD_BLOB',
        { pairs: [p] },
      );
    }
    // Bodies the type does not allow: a 12-byte delete, an empty text (signature left as it was).
    const withBody = (c: Container, body: Uint8Array) => {
      const start = c.signedLength - c.body.length;
      const length = new Uint8Array(4);
      new DataView(length.buffer).setUint32(0, body.length);
      return toBase64(concatBytes([c.bytes.subarray(0, start - 4), length, body, c.bytes.subarray(c.signedLength)]));
    };
    const del = validPair('DeleteMessage');
    await expectRejected(
      'DeleteMessage',
      { ...blobs(del), incomingBlobB64: withBody(del.incoming, del.incoming.body.subarray(0, 12)) },
      400,
      'BAD_BLOB',
      { pairs: [del] },
    );
    const text = validPair('SendMessagePair');
    await expectRejected(
      'SendMessagePair',
      { ...blobs(text), outgoingBlobB64: withBody(text.outgoing, new Uint8Array(0)) },
      400,
      'BAD_BLOB',
      { pairs: [text] },
    );
    // The rewrite with the body a copy has is that copy: only the body makes the difference above.
    assert.equal(withBody(del.incoming, del.incoming.body), blobs(del).incomingBlobB64);
  });

  it('BAD_PAIR (400): inconsistent copies, or types the op does not take — before NOT_SENDER', async () => {
    const a = validPair('SendMessagePair');
    const b = validPair('SendMessagePair');
    const edit = testPair({ from: 'alice', to: 'bob', timeMs: T, nonce: 1, revisionTimeMs: T + 5 });
    const receipt = (readAtMs: number) => encodeReceiptBody({ readAtMs, targetTimeMs: T, targetNonce: 1 });
    const receiptBodies = testPair({
      type: 3,
      from: 'bob',
      to: 'alice',
      timeMs: T + 20,
      nonce: nonce++,
      body: receipt(T + 1),
      outgoingBody: receipt(T + 2),
    });
    const inconsistent: [string, Pair][] = [
      ['copies swapped', { incoming: a.outgoing, outgoing: a.incoming }],
      ['two incoming copies', { incoming: a.incoming, outgoing: a.incoming }],
      ['two outgoing copies', { incoming: a.outgoing, outgoing: a.outgoing }],
      ['copies of two messages', { incoming: a.incoming, outgoing: b.outgoing }],
      ['copies of two revisions', { incoming: baseline.incoming, outgoing: edit.outgoing }],
      ['receipt bodies differ', receiptBodies],
    ];
    for (const [what, p] of inconsistent) {
      // The two-revision pair shares the stored baseline's keys.
      await expectRejected('SendMessagePair', blobs(p), 400, 'BAD_PAIR', {
        pairs: what === 'copies of two revisions' ? [] : [p],
      });
    }
    const deletes = [
      testPair({ type: 5, from: 'alice', to: 'bob', timeMs: T + 10, nonce: 77, body: deleteBody(T, 1) }),
      testPair({ type: 5, from: 'alice', to: 'bob', timeMs: T + 10, nonce: 77, body: deleteBody(T, 2) }),
    ] as const;
    await expectRejected(
      'DeleteMessage',
      { ...blobs(deletes[0]), outgoingBlobB64: blobs(deletes[1]).outgoingBlobB64 },
      400,
      'BAD_PAIR',
      { pairs: [...deletes] },
    );
    const clears = [
      testPair({ type: 7, from: 'alice', to: 'bob', timeMs: T + 10, nonce: 78, body: clearBody(T) }),
      testPair({ type: 7, from: 'alice', to: 'bob', timeMs: T + 10, nonce: 78, body: clearBody(T + 1) }),
    ] as const;
    await expectRejected(
      'DeleteConversation',
      { ...blobs(clears[0]), outgoingBlobB64: blobs(clears[1]).outgoingBlobB64 },
      400,
      'BAD_PAIR',
      { pairs: [...clears] },
    );

    // Consistent pairs of the types another op takes.
    const ofType = {
      1: validPair('SendMessagePair'),
      3: testPair({
        type: 3,
        from: 'alice',
        to: 'bob',
        timeMs: T + 10,
        nonce: nonce++,
        body: encodeReceiptBody({ readAtMs: T, targetTimeMs: T, targetNonce: 1 }),
      }),
      5: validPair('DeleteMessage'),
      7: validPair('DeleteConversation'),
    };
    const wrong: [PairOp, keyof typeof ofType][] = [
      ['SendMessagePair', 5],
      ['SendMessagePair', 7],
      ['DeleteMessage', 1],
      ['DeleteMessage', 3],
      ['DeleteMessage', 7],
      ['DeleteConversation', 1],
      ['DeleteConversation', 3],
      ['DeleteConversation', 5],
    ];
    for (const [op, type] of wrong)
      await expectRejected(op, blobs(ofType[type]), 400, 'BAD_PAIR', { pairs: [ofType[type]] });
    // Another sender's pair is still BAD_PAIR when it is also inconsistent or of the wrong type.
    const bobs = [
      validPair('SendMessagePair', { from: 'bob', to: 'alice' }),
      validPair('SendMessagePair', { from: 'bob', to: 'alice' }),
    ] as const;
    await expectRejected(
      'SendMessagePair',
      { ...blobs(bobs[0]), outgoingBlobB64: blobs(bobs[1]).outgoingBlobB64 },
      400,
      'BAD_PAIR',
      { pairs: [...bobs] },
    );
    const bobsDelete = validPair('DeleteMessage', { from: 'bob', to: 'alice' });
    await expectRejected('SendMessagePair', blobs(bobsDelete), 400, 'BAD_PAIR', { pairs: [bobsDelete] });
  });

  it('NOT_SENDER (403): a pair from another user — before the signature check', async () => {
    for (const op of PAIR_OPS) {
      const p = validPair(op, { from: 'bob', to: 'alice' });
      await expectRejected(op, blobs(p), 403, 'NOT_SENDER', { pairs: [p] });
    }
    // Claims bob as sender but is signed with alice's key: still NOT_SENDER, not BAD_SIGNATURE.
    const posingAsBob: PairSender = { login: 'bob', signSeed: seedOf('alice'), encPublicKey: new Uint8Array(32) };
    const forged = deleteConversationPair(posingAsBob, 'alice', T, { timeMs: T + 10 });
    await expectRejected('DeleteConversation', blobs(forged), 403, 'NOT_SENDER', { pairs: [forged] });
    // And another user's pair to a third party.
    const toCarol = validPair('SendMessagePair', { from: 'bob', to: 'carol' });
    await expectRejected('SendMessagePair', blobs(toCarol), 403, 'NOT_SENDER', { pairs: [toCarol] });
  });

  it('BAD_SIGNATURE (400): a copy not signed by the sender — before the time check', async () => {
    const stranger = createIdentity('stranger');
    const asAlice: PairSender = { login: 'alice', signSeed: stranger.signSeed, encPublicKey: stranger.encPublicKey };
    const recipient = { login: 'bob', encKey: createIdentity('bob').encPublicKey };
    const target: MessageRef = { fromLogin: 'alice', toLogin: 'bob', timeMs: T, nonce: 1 };
    const otherKey: Record<PairOp, BuiltPair> = {
      SendMessagePair: textPair(asAlice, recipient, 'forged', { timeMs: T + 10 }),
      DeleteMessage: deleteMessagePair(asAlice, target, { timeMs: T + 10 }),
      DeleteConversation: deleteConversationPair(asAlice, 'bob', T, { timeMs: T + 10 }),
    };
    const flipLast = (c: Container) => {
      const b = c.bytes.slice();
      b[b.length - 1]! ^= 1;
      return toBase64(b);
    };
    for (const op of PAIR_OPS) {
      await expectRejected(op, blobs(otherKey[op]), 400, 'BAD_SIGNATURE', { pairs: [otherKey[op]] });
      const p = validPair(op);
      // One good copy does not carry the other.
      await expectRejected(op, { ...blobs(p), outgoingBlobB64: flipLast(p.outgoing) }, 400, 'BAD_SIGNATURE', {
        pairs: [p],
      });
      await expectRejected(op, { ...blobs(p), incomingBlobB64: flipLast(p.incoming) }, 400, 'BAD_SIGNATURE', {
        pairs: [p],
      });
    }
    // A text body changed after signing (the pair stays consistent: text bodies may differ).
    const p = validPair('SendMessagePair');
    const changed = p.incoming.bytes.slice();
    changed[p.incoming.signedLength - 1]! ^= 1;
    await expectRejected('SendMessagePair', { ...blobs(p), incomingBlobB64: toBase64(changed) }, 400, 'BAD_SIGNATURE', {
      pairs: [p],
    });
    // Bad signature and a future time, or an unknown recipient: the signature is checked first.
    const future = textPair(asAlice, recipient, 'later', { timeMs: clock.now() + SKEW_MS + 1 });
    await expectRejected('SendMessagePair', blobs(future), 400, 'BAD_SIGNATURE', { pairs: [future] });
    const toNobody = deleteConversationPair(asAlice, 'nobody', T, { timeMs: T + 10 });
    await expectRejected('DeleteConversation', blobs(toNobody), 400, 'BAD_SIGNATURE', { pairs: [toNobody] });
  });

  it('BAD_TIME (400): timeMs, revisionTimeMs or reencryptedAtMs more than 5 min ahead — before USER_NOT_FOUND', async () => {
    const tooLate = () => clock.now() + SKEW_MS + 1;
    for (const op of PAIR_OPS) {
      const p = validPair(op, { timeMs: tooLate() });
      await expectRejected(op, blobs(p), 400, 'BAD_TIME', { pairs: [p] });
    }
    // A future revision of the baseline would outrank every later edit.
    const futureEdit = testPair({
      from: 'alice',
      to: 'bob',
      timeMs: T,
      nonce: 1,
      revisionTimeMs: tooLate(),
      body: utf8('edit'),
    });
    await expectRejected('SendMessagePair', blobs(futureEdit), 400, 'BAD_TIME');
    const futureReencryption = testPair({
      from: 'alice',
      to: 'bob',
      timeMs: T,
      nonce: 1,
      reencryptedAtMs: tooLate(),
      body: utf8('re'),
    });
    await expectRejected('SendMessagePair', blobs(futureReencryption), 400, 'BAD_TIME');
    const futureDelete = validPair('DeleteMessage', { revisionTimeMs: tooLate() });
    await expectRejected('DeleteMessage', blobs(futureDelete), 400, 'BAD_TIME', { pairs: [futureDelete] });
    const toNobody = validPair('SendMessagePair', { to: 'nobody', timeMs: tooLate() });
    await expectRejected('SendMessagePair', blobs(toNobody), 400, 'BAD_TIME', { pairs: [toNobody] });
    // The bound is exact: 5 minutes ahead is accepted.
    const edge = validPair('SendMessagePair', {
      to: 'carol',
      timeMs: clock.now() + SKEW_MS,
      revisionTimeMs: clock.now() + SKEW_MS,
    });
    assert.equal((await alice.request('SendMessagePair', blobs(edge))).status, 200);
  });

  it('USER_NOT_FOUND (404): an unknown recipient', async () => {
    for (const op of PAIR_OPS) {
      const p = validPair(op, { to: 'nobody' });
      await expectRejected(op, blobs(p), 404, 'USER_NOT_FOUND', { pairs: [p] });
    }
  });

  it('SetUserSetting: BAD_FIELDS for bad base64, TOO_LARGE over 64 KiB, BAD_TIME for a future updatedAtMs', async () => {
    const settings = (c: RawClient) => c.call<OpResults['GetUserSettings']>('GetUserSettings', {});
    await alice.call('SetUserSetting', { key: 'theme', valueB64: toBase64(utf8('dark')), updatedAtMs: 1_000 });
    const stored = await settings(aliceOther);
    const cases: [object, number, string][] = [
      [{ valueB64: 'not base64' }, 400, 'BAD_FIELDS'],
      [{ valueB64: 'AAA' }, 400, 'BAD_FIELDS'],
      [{ valueB64: 'AB==' }, 400, 'BAD_FIELDS'],
      [{ valueB64: toBase64(new Uint8Array(65_537)) }, 413, 'TOO_LARGE'],
      [{ updatedAtMs: clock.now() + SKEW_MS + 1 }, 400, 'BAD_TIME'],
    ];
    for (const [change, status, code] of cases) {
      const payload = { key: 'theme', valueB64: toBase64(utf8('light')), updatedAtMs: 2_000, ...change };
      assertError(await alice.request('SetUserSetting', payload), status, code, { op: 'SetUserSetting' });
      assert.deepEqual(await settings(aliceOther), stored, code);
      await assertSessionWorks(alice);
      await assertSessionWorks(bystander);
    }
    // Both limits are exact.
    const largest = toBase64(new Uint8Array(65_536).fill(1));
    assert.deepEqual(await alice.call('SetUserSetting', { key: 'big', valueB64: largest, updatedAtMs: 2_000 }), {
      key: 'big',
      updatedAtMs: 2_000,
      applied: true,
    });
    const edge = clock.now() + SKEW_MS;
    assert.deepEqual(
      await alice.call('SetUserSetting', { key: 'theme', valueB64: toBase64(utf8('light')), updatedAtMs: edge }),
      {
        key: 'theme',
        updatedAtMs: edge,
        applied: true,
      },
    );
    const { items } = await settings(aliceOther);
    assert.deepEqual(
      items.map((i) => [i.key, i.valueB64.length, i.updatedAtMs]),
      [
        ['big', largest.length, 2_000],
        ['theme', toBase64(utf8('light')).length, edge],
      ],
    );
  });
});

/** One logged-in SDK session and every DirectMessage event it receives. */
interface Peer {
  id: Identity;
  client: ShineClient;
  events: DirectMessageEvent[];
}

describe('dm through the SDK: edits, receipts, deletes, tombstones, idempotency', () => {
  let net: TestNetwork;
  let wsUrl: string;
  /** The SDK clients' wall clock: the tests choose every timeMs (in the past of the server's clock). */
  const base = Date.now() - 3_600_000;
  let now = base;
  const open: ShineClient[] = [];

  async function join(id: Identity, deviceId: string): Promise<Peer> {
    const client = await ShineClient.connect(wsUrl, { WebSocket, now: () => now });
    open.push(client);
    const events: DirectMessageEvent[] = [];
    client.on('DirectMessage', (e) => void events.push(e));
    await client.register(makeProfile(id, ['alpha'], 1, base));
    await client.login(id, deviceId);
    return { id, client, events };
  }

  /** Two fresh users, each with one session. */
  const users = async (a: string, b: string): Promise<[Peer, Peer]> => [
    await join(createIdentity(a), 'phone'),
    await join(createIdentity(b), 'phone'),
  ];

  const recipientOf = (p: Peer) => ({ login: p.id.login, encKey: p.id.encPublicKey });
  const send = (from: Peer, op: PairOp, pair: BuiltPair) =>
    from.client.request(op, { incomingBlobB64: pair.incomingBlobB64, outgoingBlobB64: pair.outgoingBlobB64 });
  /** A round trip: events published before an earlier answer elsewhere have reached p by its end. */
  const settle = async (...peers: Peer[]) => {
    for (const p of peers) await p.client.conversations();
  };
  const texts = async (p: Peer, peer: string) => (await p.client.history(peer)).items.map((i) => i.text);

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    wsUrl = net.servers[0]!.wsUrl;
  });
  after(async () => {
    for (const c of open) await c.close();
    await net?.close();
  });

  it('an edit keeps the messageKey and replaces the text for both sides; an older or equal revision changes nothing', async () => {
    const [x, y] = await users('editor', 'edited');
    now = base + 1_000;
    const sent = await x.client.sendText('edited', 'first');
    await waitUntil(() => y.events.length === 1);
    now = base + 2_000;
    const edit = await x.client.editText('edited', sent, 'second');
    assert.deepEqual(
      [edit.messageKey, edit.incomingKey, edit.revisionTimeMs],
      [sent.messageKey, sent.incomingKey, base + 2_000],
    );
    await waitUntil(() => y.events.length === 2);
    const event = await y.client.decryptEvent(y.events[1]!);
    assert.deepEqual(
      [event.messageKey, event.container.revisionTimeMs, event.kind === 'text' && event.text],
      [sent.incomingKey, base + 2_000, 'second'],
    );
    for (const [p, peer] of [
      [x, 'edited'],
      [y, 'editor'],
    ] as const) {
      const { items } = await p.client.history(peer);
      assert.deepEqual(
        items.map((i) => [i.text, i.revisionTimeMs]),
        [['second', base + 2_000]],
      );
    }

    // An older revision (the original, or an earlier edit) and another body at the same revision are
    // successes that store nothing and send nothing.
    const ref = { timeMs: sent.timeMs, nonce: sent.nonce };
    const stale = [
      textPair(x.id, recipientOf(y), 'first again', ref),
      textPair(x.id, recipientOf(y), 'stale edit', { ...ref, revisionTimeMs: base + 1_500 }),
      textPair(x.id, recipientOf(y), 'same revision, other text', { ...ref, revisionTimeMs: base + 2_000 }),
    ];
    for (const pair of stale) {
      const answer = await send(x, 'SendMessagePair', pair);
      assert.deepEqual([answer.messageKey, answer.deliveredWsSessions], [sent.messageKey, 0]);
    }
    await settle(y);
    assert.equal(y.events.length, 2);
    assert.deepEqual(await texts(x, 'edited'), ['second']);
    assert.deepEqual(await texts(y, 'editor'), ['second']);
  });

  it('read receipts set readAtMs on both sides and lower unreadCount, even when the receipt comes first', async () => {
    const [x, y] = await users('talker', 'listener');
    const sent: MessageRef[] = [];
    for (const [i, text] of ['one', 'two', 'three'].entries()) {
      now = base + 10_000 + i;
      sent.push(await x.client.sendText('listener', text));
    }
    const unread = async () => (await y.client.conversations()).map((c) => [c.peerLogin, c.unreadCount]);
    const readAt = async (p: Peer, peer: string) =>
      (await p.client.history(peer)).items.map((i) => [i.text, i.readAtMs]);
    assert.deepEqual(await unread(), [['talker', 3]]);

    now = base + 11_000;
    await y.client.markRead(sent[0]!, base + 10_500);
    assert.deepEqual(await unread(), [['talker', 2]]);
    await y.client.markRead(sent[2]!, base + 10_600);
    assert.deepEqual(await unread(), [['talker', 1]]);
    const expected = [
      ['three', base + 10_600],
      ['two', null],
      ['one', base + 10_500],
    ];
    assert.deepEqual(await readAt(x, 'listener'), expected);
    assert.deepEqual(await readAt(y, 'talker'), expected);
    // The sender's own copies never count as unread.
    assert.deepEqual(
      (await x.client.conversations()).map((c) => c.unreadCount),
      [0],
    );

    // A receipt for a message that has not arrived yet applies when it does.
    const early: MessageRef = { fromLogin: 'talker', toLogin: 'listener', timeMs: base + 12_000, nonce: 4242 };
    await y.client.markRead(early, base + 12_500);
    await send(
      x,
      'SendMessagePair',
      textPair(x.id, recipientOf(y), 'four', { timeMs: early.timeMs, nonce: early.nonce }),
    );
    assert.deepEqual((await readAt(y, 'talker'))[0], ['four', base + 12_500]);
    assert.deepEqual((await readAt(x, 'listener'))[0], ['four', base + 12_500]);
    assert.deepEqual(await unread(), [['talker', 1]]);
  });

  it('deleting one message removes only it, on both sides, whichever side deletes', async () => {
    const [x, y] = await users('writer', 'partner');
    const sent: MessageRef[] = [];
    for (const [i, text] of ['one', 'two', 'three'].entries()) {
      now = base + 20_000 + i;
      sent.push(await x.client.sendText('partner', text));
    }
    now = base + 21_000;
    // The recipient deletes the sender's message.
    await y.client.deleteMessage(sent[1]!);
    assert.deepEqual(await texts(x, 'partner'), ['three', 'one']);
    assert.deepEqual(await texts(y, 'writer'), ['three', 'one']);
    await waitUntil(() => x.events.some((e) => e.messageType === 5), 5_000, 'the delete reaches the sender');
    // The sender deletes its own.
    await x.client.deleteMessage(sent[2]!);
    assert.deepEqual(await texts(x, 'partner'), ['one']);
    assert.deepEqual(await texts(y, 'writer'), ['one']);
    assert.deepEqual(
      (await y.client.conversations()).map((c) => [c.peerLogin, c.unreadCount]),
      [['writer', 1]],
    );
  });

  it('deleting the conversation removes exactly the messages with timeMs ≤ deleteBeforeMs, now and later', async () => {
    const [x, y] = await users('clearer', 'cleared');
    const [t1, t2, t3] = [base + 30_000, base + 30_010, base + 30_020];
    now = t1;
    await x.client.sendText('cleared', 'one');
    now = t2;
    await y.client.sendText('clearer', 'two');
    now = t3;
    await x.client.sendText('cleared', 'three');
    now = t3 + 1;
    await x.client.deleteConversation('cleared', t2);
    assert.deepEqual(await texts(x, 'cleared'), ['three']);
    assert.deepEqual(await texts(y, 'clearer'), ['three']);

    // A message covered by the tombstone that arrives later is a success that is never stored.
    now = t2;
    const late = await y.client.sendText('clearer', 'late, at the boundary');
    assert.equal(late.deliveredWsSessions, 0);
    now = t2 + 1;
    const kept = await y.client.sendText('clearer', 'after the boundary');
    assert.equal(kept.deliveredWsSessions, 1);
    // A later clear with a smaller deleteBeforeMs does not shrink the tombstone.
    now = t3 + 2;
    await y.client.deleteConversation('clearer', t1);
    now = t2 - 1;
    assert.equal((await y.client.sendText('clearer', 'still covered')).deliveredWsSessions, 0);
    assert.deepEqual(await texts(x, 'cleared'), ['three', 'after the boundary']);
    assert.deepEqual(await texts(y, 'clearer'), ['three', 'after the boundary']);
    await settle(x);
    assert.deepEqual(
      x.events.filter((e) => e.messageType === 1).map((e) => e.timeMs),
      [t2, t2 + 1],
    );
  });

  it('a tombstone that arrives before its message wins: the message is answered 200 and never appears', async () => {
    const [x, y] = await users('sender', 'receiver');
    now = base + 40_000;
    // The sender deletes its own message before sending it; the recipient deletes one it has not got yet.
    const own: MessageRef = { fromLogin: 'sender', toLogin: 'receiver', timeMs: base + 39_000, nonce: 11 };
    const theirs: MessageRef = { fromLogin: 'sender', toLogin: 'receiver', timeMs: base + 39_001, nonce: 12 };
    await x.client.deleteMessage(own);
    await y.client.deleteMessage(theirs);
    // A delete covers both sides, so either way the pair is stored nowhere and will never be delivered.
    for (const [ref, state] of [
      [own, 'failed'],
      [theirs, 'failed'],
    ] as const) {
      const answer = await send(x, 'SendMessagePair', textPair(x.id, recipientOf(y), 'too late', ref));
      assert.deepEqual(
        [answer.messageKey, answer.deliveredWsSessions, answer.deliveryState],
        [`${baseKeyOf(ref)}|2`, 0, state],
      );
    }
    // A control message gets through, and nothing else did.
    now = base + 40_001;
    const control = await x.client.sendText('receiver', 'control');
    assert.equal(control.deliveredWsSessions, 1);
    await waitUntil(() => y.events.some((e) => e.messageType === 1));
    await settle(y);
    assert.deepEqual(
      y.events.filter((e) => e.messageType <= 2).map((e) => e.messageKey),
      [control.incomingKey],
    );
    assert.deepEqual(await texts(x, 'receiver'), ['control']);
    assert.deepEqual(await texts(y, 'sender'), ['control']);
  });

  it('the same pair twice: the same keys and state, one copy, one event per session', async () => {
    const [x, y] = await users('repeater', 'repeated');
    const x2 = await join(x.id, 'laptop');
    now = base + 50_000;
    const pair = textPair(x.id, recipientOf(y), 'once', { timeMs: now });
    const first = await send(x, 'SendMessagePair', pair);
    const second = await send(x, 'SendMessagePair', pair);
    const { deliveredWsSessions: n1, ...rest1 } = first;
    const { deliveredWsSessions: n2, ...rest2 } = second;
    assert.deepEqual(rest2, rest1);
    assert.deepEqual([rest1.messageKey, rest1.deliveryState], [messageKeyOf(pair.outgoing), 'delivered']);
    // The counters count the sessions this request reached: the repeat reaches none.
    assert.deepEqual([n1, n2], [1, 0]);

    now = base + 50_001;
    const del = deleteMessagePair(x.id, { fromLogin: 'repeater', toLogin: 'repeated', timeMs: base + 1, nonce: 1 });
    const d1 = await send(x, 'DeleteMessage', del);
    const d2 = await send(x, 'DeleteMessage', del);
    assert.deepEqual({ ...d2, deliveredWsSessions: 0 }, { ...d1, deliveredWsSessions: 0 });
    await settle(y, x2);
    assert.deepEqual(
      y.events.map((e) => e.messageKey),
      [messageKeyOf(pair.incoming), messageKeyOf(del.incoming)],
    );
    assert.deepEqual(
      x2.events.map((e) => e.messageKey),
      [messageKeyOf(pair.outgoing), messageKeyOf(del.outgoing)],
    );
    assert.deepEqual(x.events, []);
    assert.deepEqual(await texts(x, 'repeated'), ['once']);
    assert.deepEqual(await texts(y, 'repeater'), ['once']);
  });
});

describe('dm: reconnect and replay (docs/protocol.md §5.3)', () => {
  const clock = new ManualClock();
  const T = clock.now() - 600_000;
  const alice = pairUser('alice');
  const bob = pairUser('bob');
  let net: TestNetwork;
  let server: RunningServer;
  let laptop: RawClient;
  let phone: RawClient;
  let watch: RawClient;
  /** The copies alice sent, with the server time they were stored at. */
  const stored = new Map<string, { pair: Pair; storedAtMs: number }>();

  /** Logs in and waits until any replay is on the socket. */
  async function online(user: TestUser, deviceId: string): Promise<RawClient> {
    const c = await connectUser(server.wsUrl, user, deviceId);
    await settled(c);
    return c;
  }

  async function offline(c: RawClient, user: TestUser, deviceId: string): Promise<void> {
    await c.close();
    await waitUntil(
      () => server.ctx.hub.sessionsOf(user.login).every((s) => s.deviceId !== deviceId),
      5_000,
      `${deviceId} offline`,
    );
  }

  /** Sends a pair one millisecond after the previous store, so storedAtMs orders them. */
  async function sendAt(from: RawClient, name: string, op: PairOp, pair: Pair): Promise<PairAnswer> {
    clock.advance(1);
    const answer = await from.call<PairAnswer>(op, blobs(pair));
    stored.set(name, { pair, storedAtMs: clock.now() });
    return answer;
  }
  const incomingEvent = (name: string) => eventOf(stored.get(name)!.pair.incoming, stored.get(name)!.storedAtMs);
  const outgoingEvent = (name: string) => eventOf(stored.get(name)!.pair.outgoing, stored.get(name)!.storedAtMs);

  before(async () => {
    net = await startNetwork({ clock, servers: [{ serverLogin: 'alpha' }] });
    server = net.servers[0]!;
    // First sight of bob's phone and alice's tablet: from here on, what they miss is kept for them.
    await offline(await online(bob, 'phone'), bob, 'phone');
    await offline(await online(alice, 'tablet'), alice, 'tablet');
    laptop = await online(alice, 'laptop');
  });
  after(async () => {
    for (const c of [laptop, phone, watch]) await c?.close();
    await net?.close();
  });

  it('a known device that logs in again gets exactly the copies it missed, in storedAtMs order', async () => {
    // Sent newest timeMs first, so storedAtMs order is neither timeMs nor messageKey order.
    for (const [name, dt, nonce] of [
      ['m1', 30, 1],
      ['m2', 20, 2],
      ['m3', 10, 3],
    ] as const) {
      const answer = await sendAt(
        laptop,
        name,
        'SendMessagePair',
        testPair({ from: 'alice', to: 'bob', timeMs: T + dt, nonce }),
      );
      assert.equal(answer.deliveredWsSessions, 0, 'bob is offline');
    }
    phone = await connectUser(server.wsUrl, bob, 'phone');
    await waitUntil(() => directMessages(phone).length >= 3, 5_000, 'the replay');
    await settled(phone);
    assert.deepEqual(directMessages(phone), [incomingEvent('m1'), incomingEvent('m2'), incomingEvent('m3')]);
  });

  it('acknowledged copies are not replayed again', async () => {
    const keys = ['m1', 'm2', 'm3'].map((n) => messageKeyOf(stored.get(n)!.pair.incoming));
    // Duplicates, an unknown key and a copy owned by someone else are not counted.
    const alicesCopy = messageKeyOf(stored.get('m1')!.pair.outgoing);
    const answer = await phone.call<OpResults['AckSessionDelivery']>('AckSessionDelivery', {
      messageKeys: [...keys, keys[0], 'alice|bob|1|1|1', alicesCopy],
    });
    assert.equal(answer.acked, 3);
    await offline(phone, bob, 'phone');
    phone = await online(bob, 'phone');
    assert.deepEqual(directMessages(phone), []);
    assert.deepEqual(await server.ctx.store.devices.pendingForDevice('bob', 'phone', null, 10), []);
  });

  it('a newer revision of an acknowledged copy is replayed, and so is a tombstone', async () => {
    await offline(phone, bob, 'phone');
    const m2 = stored.get('m2')!.pair.incoming;
    await sendAt(
      laptop,
      'm2-edit',
      'SendMessagePair',
      testPair({
        from: 'alice',
        to: 'bob',
        timeMs: m2.timeMs,
        nonce: m2.nonce,
        revisionTimeMs: clock.now() + 1,
        body: utf8('edited'),
      }),
    );
    const m3 = stored.get('m3')!.pair.incoming;
    await sendAt(
      laptop,
      'del-m3',
      'DeleteMessage',
      testPair({
        type: 5,
        from: 'alice',
        to: 'bob',
        timeMs: clock.now() + 1,
        nonce: 9,
        body: deleteBody(m3.timeMs, m3.nonce),
      }),
    );
    phone = await connectUser(server.wsUrl, bob, 'phone');
    await waitUntil(() => directMessages(phone).length >= 2, 5_000, 'the replay');
    await settled(phone);
    assert.deepEqual(directMessages(phone), [incomingEvent('m2-edit'), incomingEvent('del-m3')]);
    assert.equal(
      (
        await phone.call<OpResults['AckSessionDelivery']>('AckSessionDelivery', {
          messageKeys: directMessages(phone).map((e) => e.messageKey),
        })
      ).acked,
      2,
    );
  });

  it('a device never seen gets no replay; it reads history, then gets events live', async () => {
    watch = await online(bob, 'watch');
    assert.deepEqual(directMessages(watch), []);
    const { items } = await watch.call<OpResults['GetDirectMessages']>('GetDirectMessages', { peerLogin: 'alice' });
    assert.deepEqual(
      items.map((i) => i.blobB64),
      [toBase64(stored.get('m1')!.pair.incoming.bytes), toBase64(stored.get('m2-edit')!.pair.incoming.bytes)],
    );
    const answer = await sendAt(
      laptop,
      'm4',
      'SendMessagePair',
      testPair({ from: 'alice', to: 'bob', timeMs: T + 40, nonce: 4 }),
    );
    assert.equal(answer.deliveredWsSessions, 2, 'phone and watch');
    await settled(watch);
    assert.deepEqual(directMessages(watch), [incomingEvent('m4')]);
  });

  it("the sending device's own copies count as acknowledged; the owner's other known device gets them", async () => {
    await offline(laptop, alice, 'laptop');
    await sendAt(watch, 'b1', 'SendMessagePair', testPair({ from: 'bob', to: 'alice', timeMs: T + 50, nonce: 5 }));
    laptop = await connectUser(server.wsUrl, alice, 'laptop');
    await waitUntil(() => directMessages(laptop).length >= 1, 5_000, 'the replay');
    await settled(laptop);
    assert.deepEqual(directMessages(laptop), [incomingEvent('b1')]);

    // The tablet, seen before any of this, missed every copy of alice's: her outgoing ones included
    // (m3's was removed by its delete; m2's is the edit, stored when the edit was).
    const tablet = await connectUser(server.wsUrl, alice, 'tablet');
    await waitUntil(() => directMessages(tablet).length >= 5, 5_000, 'the replay');
    await settled(tablet);
    assert.deepEqual(directMessages(tablet), [
      outgoingEvent('m1'),
      outgoingEvent('m2-edit'),
      outgoingEvent('del-m3'),
      outgoingEvent('m4'),
      incomingEvent('b1'),
    ]);
    await tablet.close();
  });

  it("a login raises the device's replay floor to the first copy it lacks, and no nearer the clock than an hour", async () => {
    const floorOf = async (deviceId: string) =>
      Number(
        (
          await queryTestDb(
            server.config.db,
            'SELECT replay_floor_ms AS "floorMs" FROM session_devices WHERE owner_login = ? AND device_id = ?',
            ['bob', deviceId],
          )
        )[0]!.floorMs,
      );
    // The phone got m4 live and never acknowledged it; two hours pass.
    await offline(phone, bob, 'phone');
    clock.advance(2 * 3_600_000);
    phone = await connectUser(server.wsUrl, bob, 'phone');
    await waitUntil(() => directMessages(phone).length >= 1, 5_000, 'the replay');
    await settled(phone);
    assert.deepEqual(directMessages(phone)[0], incomingEvent('m4'));
    await waitUntil(async () => (await floorOf('phone')) === stored.get('m4')!.storedAtMs, 5_000, "m4's time");
    // Acknowledged, the next login finds nothing and the floor stops an hour before the clock.
    await phone.call('AckSessionDelivery', { messageKeys: directMessages(phone).map((e) => e.messageKey) });
    await offline(phone, bob, 'phone');
    phone = await online(bob, 'phone');
    assert.deepEqual(directMessages(phone), []);
    await waitUntil(async () => (await floorOf('phone')) === clock.now() - 3_600_000, 5_000, 'an hour ago');
    // A copy stored now, above the floor, is replayed as before.
    await offline(phone, bob, 'phone');
    await sendAt(laptop, 'm5', 'SendMessagePair', testPair({ from: 'alice', to: 'bob', timeMs: T + 60, nonce: 6 }));
    phone = await connectUser(server.wsUrl, bob, 'phone');
    await waitUntil(() => directMessages(phone).length >= 1, 5_000, 'the replay');
    await settled(phone);
    assert.deepEqual(directMessages(phone), [incomingEvent('m5')]);
  });
});

describe('dm: history paging and conversations', () => {
  const N = 500;
  const T = Date.now() - 3_600_000;
  let net: TestNetwork;
  let alice: RawClient;
  let bob: RawClient;
  let carol: RawClient;
  /** alice's copies of the dialog with bob, in history order. */
  let expected: { timeMs: number; messageKey: string; messageType: number }[];

  const page = (q: object) =>
    alice.call<OpResults['GetDirectMessages']>('GetDirectMessages', { peerLogin: 'bob', ...q });
  const keys = (items: { messageKey: string }[]) => items.map((i) => i.messageKey);

  before(async () => {
    // 500 pipelined sends on one socket would trip the default burst of 400.
    net = await startNetwork({
      servers: [{ serverLogin: 'alpha', rateLimit: { perSecond: 100_000, burst: 100_000 } }],
    });
    const url = net.servers[0]!.wsUrl;
    alice = await connectUser(url, pairUser('alice'));
    bob = await connectUser(url, pairUser('bob'));
    carol = await connectUser(url, pairUser('carol'));
    await alice.call('RegisterUser', { profile: pairUser('dave').profile });
    // Both directions, three messages a millisecond, so ties on timeMs are broken by messageKey.
    const pairs = Array.from({ length: N }, (_, i) =>
      i % 2 === 0
        ? testPair({ from: 'alice', to: 'bob', timeMs: T + Math.floor(i / 3), nonce: 1_000 + i })
        : testPair({ from: 'bob', to: 'alice', timeMs: T + Math.floor(i / 3), nonce: 1_000 + i }),
    );
    // In batches: each request's answer timeout then covers its own store, not the 499 queued before it
    // (on PostgreSQL a pair is a transaction of several round trips, not part of a group commit).
    const answers: { status: number }[] = [];
    for (let i = 0; i < N; i += 50) {
      const batch = pairs.slice(i, i + 50);
      answers.push(
        ...(await Promise.all(
          batch.map((p) => (p.incoming.fromLogin === 'alice' ? alice : bob).request('SendMessagePair', blobs(p))),
        )),
      );
    }
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]));
    expected = pairs
      .map((p) => (p.incoming.fromLogin === 'alice' ? p.outgoing : p.incoming))
      .map((c) => ({ timeMs: c.timeMs, messageKey: messageKeyOf(c), messageType: c.messageType }))
      .sort((a, b) => b.timeMs - a.timeMs || (a.messageKey < b.messageKey ? 1 : -1));
  });
  after(async () => {
    for (const c of [alice, bob, carol]) await c?.close();
    await net?.close();
  });

  it('pages 500 messages 200/200/100 by cursor, newest first by (timeMs, messageKey), without gaps or repeats', async () => {
    const got: OpResults['GetDirectMessages']['items'] = [];
    let cursor = { beforeTimeMs: 0, beforeMessageKey: '' };
    for (const [limit, hasMore] of [
      [200, true],
      [200, true],
      [100, false],
    ] as const) {
      const p = await page({ ...cursor, limit });
      assert.equal(p.items.length, limit);
      assert.equal(p.hasMore, hasMore);
      const last = p.items.at(-1)!;
      assert.deepEqual([p.nextBeforeTimeMs, p.nextBeforeMessageKey], [last.timeMs, last.messageKey]);
      got.push(...p.items);
      cursor = { beforeTimeMs: p.nextBeforeTimeMs, beforeMessageKey: p.nextBeforeMessageKey };
    }
    assert.deepEqual(keys(got), keys(expected));
    assert.equal(new Set(keys(got)).size, N);
    for (let i = 1; i < got.length; i++) {
      const [a, b] = [got[i - 1]!, got[i]!];
      assert.ok(a.timeMs > b.timeMs || (a.timeMs === b.timeMs && a.messageKey > b.messageKey), `order at ${i}`);
    }
    // Both copy types, each with its own deliveryState rule.
    assert.deepEqual(
      new Set(got.map((i) => `${i.messageType}:${i.deliveryState}`)),
      new Set(['1:null', '2:delivered']),
    );
    const after = await page({ ...cursor, limit: 200 });
    assert.deepEqual([after.items, after.hasMore], [[], false]);
  });

  it('a page of large messages is cut at 2 000 000 bytes of containers: hasMore, and the cursor goes on from the cut', async () => {
    // 40 messages of 60 000-byte bodies, carol to dave: 200 of them in one answer would be about 17 MB.
    await using dave = await connectUser(net.servers[0]!.wsUrl, pairUser('dave'));
    const body = new Uint8Array(60_000).fill(7);
    for (let i = 0; i < 40; i++) {
      const p = testPair({ from: 'carol', to: 'dave', timeMs: T + i, nonce: i, body });
      assert.equal((await carol.request('SendMessagePair', blobs(p))).status, 200);
    }
    const history = (q: object) =>
      dave.call<OpResults['GetDirectMessages']>('GetDirectMessages', { peerLogin: 'carol', limit: 200, ...q });
    const first = await history({});
    const raw = first.items.reduce((n, i) => n + Buffer.from(i.blobB64, 'base64').length, 0);
    assert.ok(raw <= 2_000_000 && first.items.length > 20, `${first.items.length} items, ${raw} bytes`);
    assert.equal(first.hasMore, true, 'cut by its bytes');
    const last = first.items.at(-1)!;
    assert.deepEqual([first.nextBeforeTimeMs, first.nextBeforeMessageKey], [last.timeMs, last.messageKey]);
    const rest = await history({ beforeTimeMs: first.nextBeforeTimeMs, beforeMessageKey: first.nextBeforeMessageKey });
    assert.equal(rest.hasMore, false);
    assert.deepEqual(
      [...first.items, ...rest.items].map((i) => i.timeMs),
      Array.from({ length: 40 }, (_, i) => T + 39 - i),
      'every message once, newest first',
    );
  });

  it('a cursor inside a run of equal timeMs continues after exactly that message', async () => {
    const i = expected.findIndex(
      (e, k) => k > 0 && expected[k - 1]!.timeMs === e.timeMs && expected[k + 1]?.timeMs === e.timeMs,
    );
    assert.ok(i > 0);
    const p = await page({ beforeTimeMs: expected[i]!.timeMs, beforeMessageKey: expected[i]!.messageKey, limit: 4 });
    assert.deepEqual(keys(p.items), keys(expected.slice(i + 1, i + 5)));
  });

  it('clamps limit to 1..200 with a default of 50', async () => {
    for (const [limit, n] of [
      [0, 1],
      [-7, 1],
      [1, 1],
      [199, 199],
      [201, 200],
      [1_000, 200],
      [undefined, 50],
    ] as const) {
      const p = await page(limit === undefined ? {} : { limit });
      assert.deepEqual(keys(p.items), keys(expected.slice(0, n)), `limit ${limit}`);
      assert.equal(p.hasMore, true);
    }
  });

  it('lists conversations newest first with their last message and unread count', async () => {
    const fromCarol = [0, 1].map((k) => testPair({ from: 'carol', to: 'alice', timeMs: T + 10_000 + k, nonce: 7 + k }));
    for (const p of fromCarol) await carol.call('SendMessagePair', blobs(p));
    const toDave = testPair({ from: 'alice', to: 'dave', timeMs: T - 10_000, nonce: 9 });
    await alice.call('SendMessagePair', blobs(toDave));
    const conversations = async (c: RawClient, limit?: number) =>
      (await c.call<OpResults['GetConversations']>('GetConversations', limit === undefined ? {} : { limit })).items;

    const newest = expected[0]!;
    const all = [
      {
        peerLogin: 'carol',
        lastTimeMs: T + 10_001,
        lastMessageKey: messageKeyOf(fromCarol[1]!.incoming),
        unreadCount: 2,
      },
      { peerLogin: 'bob', lastTimeMs: newest.timeMs, lastMessageKey: newest.messageKey, unreadCount: N / 2 },
      { peerLogin: 'dave', lastTimeMs: T - 10_000, lastMessageKey: messageKeyOf(toDave.outgoing), unreadCount: 0 },
    ];
    assert.deepEqual(await conversations(alice), all);
    assert.deepEqual(await conversations(alice, 1), all.slice(0, 1));
    assert.deepEqual(await conversations(alice, 0), all.slice(0, 1));

    // alice reads bob's newest message: one fewer unread, for alice only.
    const target = expected.find((e) => e.messageType === 1)!;
    const [, , timeMs, nonce] = target.messageKey.split('|').map(Number);
    const receipt = testPair({
      type: 3,
      from: 'alice',
      to: 'bob',
      timeMs: T + 20_000,
      nonce: 1,
      body: encodeReceiptBody({ readAtMs: T + 20_000, targetTimeMs: timeMs!, targetNonce: nonce! }),
    });
    await alice.call('SendMessagePair', blobs(receipt));
    assert.deepEqual(
      (await conversations(alice)).map((c) => [c.peerLogin, c.unreadCount]),
      [
        ['carol', 2],
        ['bob', N / 2 - 1],
        ['dave', 0],
      ],
    );
    const bobsView = await conversations(bob);
    assert.deepEqual(
      bobsView.map((c) => [c.peerLogin, c.unreadCount]),
      [['alice', N / 2]],
    );
  });
});

describe('dm: settings', () => {
  let net: TestNetwork;
  let alice: RawClient;
  let aliceOther: RawClient;
  let bob: RawClient;

  const value = (...bytes: number[]) => toBase64(new Uint8Array(bytes));
  const set = (key: string, valueB64: string, updatedAtMs: number) =>
    alice.call<OpResults['SetUserSetting']>('SetUserSetting', { key, valueB64, updatedAtMs });
  /** What alice's other session reads: [key, value, updatedAtMs]. */
  const read = async (keys?: string[]) =>
    (await aliceOther.call<OpResults['GetUserSettings']>('GetUserSettings', keys ? { keys } : {})).items.map((i) => [
      i.key,
      i.valueB64,
      i.updatedAtMs,
    ]);

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    const url = net.servers[0]!.wsUrl;
    const aliceUser = makeUser('alice', ['alpha']);
    alice = await connectUser(url, aliceUser, 'phone');
    aliceOther = await connectUser(url, aliceUser, 'laptop');
    bob = await connectUser(url, makeUser('bob', ['alpha']));
  });
  after(async () => {
    for (const c of [alice, aliceOther, bob]) await c?.close();
    await net?.close();
  });

  it('last writer wins by updatedAtMs, then by value bytes; the answer carries the stored updatedAtMs', async () => {
    assert.deepEqual(await set('theme', value(5), 1_000), { key: 'theme', updatedAtMs: 1_000, applied: true });
    assert.deepEqual(await read(), [['theme', value(5), 1_000]]);
    const steps: [string, number, boolean, [string, number]][] = [
      [value(9), 999, false, [value(5), 1_000]], // older
      [value(4), 1_000, false, [value(5), 1_000]], // tie, smaller bytes
      [value(5), 1_000, false, [value(5), 1_000]], // the same write again
      [value(5, 0), 1_000, true, [value(5, 0), 1_000]], // tie, larger bytes
      [value(1), 2_000, true, [value(1), 2_000]], // newer
    ];
    for (const [valueB64, at, applied, [v, storedAt]] of steps) {
      assert.deepEqual(
        await set('theme', valueB64, at),
        { key: 'theme', updatedAtMs: applied ? at : storedAt, applied },
        `${valueB64}@${at}`,
      );
      assert.deepEqual(await read(), [['theme', v, storedAt]]);
    }
  });

  it('an empty value deletes, and the delete itself is subject to last writer wins', async () => {
    await set('draft', value(1, 2, 3), 1_000);
    assert.deepEqual(await set('draft', '', 2_000), { key: 'draft', updatedAtMs: 2_000, applied: true });
    assert.deepEqual(await read(['draft']), []);
    // An older write does not bring it back; a newer one does.
    assert.deepEqual(await set('draft', value(7), 1_500), { key: 'draft', updatedAtMs: 2_000, applied: false });
    assert.deepEqual(await read(['draft']), []);
    assert.deepEqual(await set('draft', value(8), 2_001), { key: 'draft', updatedAtMs: 2_001, applied: true });
    assert.deepEqual(await read(['draft']), [['draft', value(8), 2_001]]);
  });

  it('reads all settings or only the requested keys, and only the user’s own', async () => {
    for (const key of ['k-a', 'k-b', 'k-c']) await set(key, toBase64(utf8(key)), 3_000);
    const filtered = await read(['k-c', 'k-a', 'missing']);
    assert.deepEqual(filtered.sort(), [
      ['k-a', toBase64(utf8('k-a')), 3_000],
      ['k-c', toBase64(utf8('k-c')), 3_000],
    ]);
    const everything = (await read()).map((i) => i[0]);
    for (const key of ['k-a', 'k-b', 'k-c', 'theme', 'draft']) assert.ok(everything.includes(key), key);
    const none = { items: [], hasMore: false, nextKey: '' };
    assert.deepEqual(await bob.call('GetUserSettings', {}), none);
    assert.deepEqual(await bob.call('GetUserSettings', { keys: ['k-a'] }), none);
  });

  it('pages by key (UTF-8 byte order) and ends a page at 2 000 000 bytes of values: hasMore, afterKey = nextKey', async () => {
    await using carol = await connectUser(net.servers[0]!.wsUrl, makeUser('carol', ['alpha']));
    // 40 settings of 60 000 bytes (2.4 MB); 'z…' sorts before 'é…' in byte order (0x7a < 0xc3), not in most collations.
    const keys = Array.from({ length: 40 }, (_, i) => `${i < 20 ? 'z' : 'é'}${String(i).padStart(2, '0')}`);
    for (const [i, key] of keys.entries()) {
      const answer = await carol.call<OpResults['SetUserSetting']>('SetUserSetting', {
        key,
        valueB64: toBase64(new Uint8Array(60_000).fill(i)),
        updatedAtMs: 5_000,
      });
      assert.equal(answer.applied, true);
    }
    const page = (q: object) => carol.call<OpResults['GetUserSettings']>('GetUserSettings', q);
    const first = await page({});
    assert.equal(first.items.length, 33, '33 × 60 000 bytes, the 34th would pass 2 000 000');
    assert.deepEqual([first.hasMore, first.nextKey], [true, first.items.at(-1)!.key]);
    const rest = await page({ afterKey: first.nextKey });
    assert.deepEqual([rest.items.length, rest.hasMore, rest.nextKey], [7, false, keys.at(-1)]);
    assert.deepEqual(
      [...first.items, ...rest.items].map((i) => i.key),
      keys,
      'every key once, z… before é…',
    );
    // With keys: the same order and cut, over the named ones only.
    const named = await page({ keys: [keys[39]!, keys[0]!, keys[1]!], afterKey: keys[0] });
    assert.deepEqual([named.items.map((i) => i.key), named.hasMore], [[keys[1], keys[39]], false]);
  });
});
