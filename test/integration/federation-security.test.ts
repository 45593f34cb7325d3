/**
 * Server sessions and server operations (docs/protocol.md §5.1 ServerAuth, §5.4) against real servers: who may
 * authenticate as a server, what an authenticated server may do, and that every refusal stores nothing.
 * The "other servers" are identities whose keys the test holds, listed in the target's static directory.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { DeliveryStatusItem } from '../../src/protocol/ops.js';
import { containerSha256B64, verifyReceipt } from '../../src/protocol/receipt.js';
import type { RunningServer } from '../../src/server/app.js';
import { assertError } from '../helpers/assert.js';
import type { TestPair } from '../helpers/federation.js';
import {
  directMessageEvent,
  directMessagesFor,
  fakeServer,
  sendPair,
  serverAuthPayload,
  serverSession,
  textPair,
} from '../helpers/federation.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import { connectUser, makeUser } from '../helpers/users.js';

const FIVE_MIN = 5 * 60_000;

/** Asserts that a server holds neither copy of the pair, nor a delivery row for it. */
async function assertNothingStored(server: RunningServer, pair: TestPair): Promise<void> {
  assert.equal(await server.ctx.store.messages.getCopy(pair.incomingKey), null, `${pair.incomingKey} is not stored`);
  assert.equal(await server.ctx.store.messages.getCopy(pair.outgoingKey), null, `${pair.outgoingKey} is not stored`);
  assert.equal(await server.ctx.store.delivery.getDelivery(pair.outgoingKey), null, 'no delivery row');
}

const incomingOnly = (pair: TestPair, extra: Record<string, unknown> = {}) => ({
  incomingBlobB64: pair.incomingBlobB64,
  ...extra,
});
const wholePair = (pair: TestPair, extra: Record<string, unknown> = {}) => ({
  incomingBlobB64: pair.incomingBlobB64,
  outgoingBlobB64: pair.outgoingBlobB64,
  ...extra,
});

describe('federation security: ServerAuth and server operations', () => {
  // gamma and delta are other servers whose keys the test holds; nothing listens at their URLs.
  const gamma = fakeServer('gamma');
  const delta = fakeServer('delta');
  const zeta = fakeServer('zeta'); // not in any directory
  const alice = makeUser('alice', ['alpha']);
  const ann = makeUser('ann', ['alpha', 'delta']); // delta is ann's other access server
  const carol = makeUser('carol', ['gamma']); // known to alpha and omega from the directory file
  const erin = makeUser('erin', ['omega', 'delta']);
  let dir: string;
  let net: TestNetwork;
  let aliceSession: RawClient;
  const alpha = (): RunningServer => net.servers[0]!;
  const omega = (): RunningServer => net.servers[1]!;
  const local = (): RunningServer => net.servers[2]!;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'shine-fed-sec-'));
    const directoryFile = join(dir, 'directory.json');
    await writeFile(
      directoryFile,
      JSON.stringify({ servers: [gamma.descriptor, delta.descriptor], users: [carol.profile] }),
    );
    net = await startNetwork({
      servers: [
        { serverLogin: 'alpha', directoryFile },
        { serverLogin: 'omega', directoryFile, s2sAuth: 'off' },
        { serverLogin: 'local' },
      ],
    });
    aliceSession = await connectUser(alpha().wsUrl, alice);
    await (await connectUser(alpha().wsUrl, ann)).close();
    await (await connectUser(omega().wsUrl, erin)).close();
  });
  after(async () => {
    await aliceSession.close();
    await net.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('accepts ServerAuth signed with the directory key of the named server, for this server', async () => {
    await using c = await connectRaw(alpha().wsUrl);
    const answer = await c.call('ServerAuth', serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha' }));
    assert.deepEqual(answer, { serverLogin: 'gamma', targetServerLogin: 'alpha' });
    // The socket is a server session now.
    const status = await c.call<DeliveryStatusItem>('GetDmDeliveryStatus', { messageKey: 'alice|carol|1|1|2' });
    assert.deepEqual(status, { messageKey: 'alice|carol|1|1|2', known: false, delivered: false });
  });

  it('refuses a server that is not in the directory, and a known name signed with another key (401 AUTH_FAILED)', async () => {
    await using c = await connectRaw(alpha().wsUrl);
    assertError(
      await c.request('ServerAuth', serverAuthPayload(zeta.seed, { from: 'zeta', to: 'alpha' })),
      401,
      'AUTH_FAILED',
    );
    assertError(
      await c.request('ServerAuth', serverAuthPayload(zeta.seed, { from: 'gamma', to: 'alpha' })),
      401,
      'AUTH_FAILED',
    );
    const m = textPair(carol, 'alice');
    assertError(await c.request('ReceiveIncomingMessage', incomingOnly(m)), 401, 'NOT_AUTHENTICATED', {
      op: 'ReceiveIncomingMessage',
    });
    await assertNothingStored(alpha(), m);
  });

  it('refuses ServerAuth for another target server (401 AUTH_FAILED)', async () => {
    await using c = await connectRaw(alpha().wsUrl);
    // Validly signed, but for beta.
    assertError(
      await c.request('ServerAuth', serverAuthPayload(gamma.seed, { from: 'gamma', to: 'beta' })),
      401,
      'AUTH_FAILED',
    );
    // Names alpha, but the signature was made for beta.
    assertError(
      await c.request('ServerAuth', serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha', signedTo: 'beta' })),
      401,
      'AUTH_FAILED',
    );
    assertError(await c.request('GetDmDeliveryStatus', { messageKey: 'alice|carol|1|1|2' }), 401, 'NOT_AUTHENTICATED');
  });

  it('refuses a timestamp outside ±5 minutes of the server time (401 AUTH_FAILED); inside is fine', async () => {
    await using c = await connectRaw(alpha().wsUrl);
    const now = Date.now();
    assertError(
      await c.request(
        'ServerAuth',
        serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha', timestampMs: now - FIVE_MIN - 10_000 }),
      ),
      401,
      'AUTH_FAILED',
    );
    assertError(
      await c.request(
        'ServerAuth',
        serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha', timestampMs: now + FIVE_MIN + 10_000 }),
      ),
      401,
      'AUTH_FAILED',
    );
    assertError(await c.request('GetDmDeliveryStatus', { messageKey: 'alice|carol|1|1|2' }), 401, 'NOT_AUTHENTICATED');
    assert.equal(
      (
        await c.request(
          'ServerAuth',
          serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha', timestampMs: now - 4 * 60_000 }),
        )
      ).ok,
      true,
    );
  });

  it('refuses server ops on a socket without ServerAuth, a user session included (401 NOT_AUTHENTICATED); nothing stored', async () => {
    await using c = await connectRaw(alpha().wsUrl);
    const m = textPair(carol, 'alice');
    const forward = textPair(ann, 'carol');
    for (const client of [c, aliceSession]) {
      assertError(
        await client.request('ReceiveIncomingMessage', incomingOnly(m, { sourceServerLogin: 'gamma' })),
        401,
        'NOT_AUTHENTICATED',
      );
      assertError(
        await client.request('ReceiveOutcomingMessage', wholePair(forward, { sourceServerLogin: 'delta' })),
        401,
        'NOT_AUTHENTICATED',
      );
      assertError(
        await client.request('GetDmDeliveryStatus', { messageKey: forward.outgoingKey }),
        401,
        'NOT_AUTHENTICATED',
      );
    }
    await assertNothingStored(alpha(), m);
    await assertNothingStored(alpha(), forward);
    assert.deepEqual(directMessagesFor(aliceSession, m.incomingKey), []);
  });

  it('refuses a sourceServerLogin other than the authenticated server (403 SOURCE_MISMATCH); nothing stored', async () => {
    await using g = await serverSession(alpha(), gamma);
    const m = textPair(carol, 'alice');
    assertError(
      await g.request('ReceiveIncomingMessage', incomingOnly(m, { sourceServerLogin: 'delta' })),
      403,
      'SOURCE_MISMATCH',
    );
    assertError(
      await g.request('GetDmDeliveryStatus', { messageKey: m.outgoingKey, sourceServerLogin: 'delta' }),
      403,
      'SOURCE_MISMATCH',
    );
    await assertNothingStored(alpha(), m);
    const forward = textPair(ann, 'carol');
    await using d = await serverSession(alpha(), delta);
    assertError(
      await d.request('ReceiveOutcomingMessage', wholePair(forward, { sourceServerLogin: 'gamma' })),
      403,
      'SOURCE_MISMATCH',
    );
    await assertNothingStored(alpha(), forward);

    // The same copy with the true source (or none) is delivered: the refusal was about the claim alone.
    const ok = await g.call<{ messageKey: string; deliveredWsSessions: number }>(
      'ReceiveIncomingMessage',
      incomingOnly(m, { sourceServerLogin: 'gamma' }),
    );
    assert.equal(ok.messageKey, m.incomingKey);
    assert.equal(ok.deliveredWsSessions, 1);
    await directMessageEvent(aliceSession, m.incomingKey);
    assert.ok(await alpha().ctx.store.messages.getCopy(m.incomingKey));
  });

  it('refuses ReceiveIncomingMessage for a recipient this server does not serve (403 LOCAL_SERVER_NOT_ACCESS_SERVER); nothing stored', async () => {
    await using g = await serverSession(alpha(), gamma);
    const toCarol = textPair(alice, 'carol'); // carol's only access server is gamma
    assertError(
      await g.request('ReceiveIncomingMessage', incomingOnly(toCarol)),
      403,
      'LOCAL_SERVER_NOT_ACCESS_SERVER',
    );
    await assertNothingStored(alpha(), toCarol);
    // A login alpha has never heard of is not one of its users either.
    const toStranger = textPair(alice, 'stranger');
    assertError(
      await g.request('ReceiveIncomingMessage', incomingOnly(toStranger)),
      403,
      'LOCAL_SERVER_NOT_ACCESS_SERVER',
    );
    await assertNothingStored(alpha(), toStranger);
  });

  it('takes ReceiveOutcomingMessage only from the sender’s other access server (403 NOT_PEER); nothing stored', async () => {
    const forward = textPair(ann, 'carol');
    await using g = await serverSession(alpha(), gamma);
    assertError(await g.request('ReceiveOutcomingMessage', wholePair(forward)), 403, 'NOT_PEER');
    await assertNothingStored(alpha(), forward);
    // A sender alpha does not serve at all, even from her own server.
    const carols = textPair(carol, 'alice');
    assertError(await g.request('ReceiveOutcomingMessage', wholePair(carols)), 403, 'NOT_PEER');
    await assertNothingStored(alpha(), carols);
    // Sizes come before decoding (docs/protocol.md §5.2): an oversized blob is TOO_LARGE even beside an undecodable one.
    const huge = 'A'.repeat(4 * Math.ceil(70_000 / 3));
    assertError(
      await g.request('ReceiveOutcomingMessage', { incomingBlobB64: 'AAAA', outgoingBlobB64: huge }),
      413,
      'TOO_LARGE',
    );
    assertError(
      await g.request('ReceiveOutcomingMessage', { incomingBlobB64: 'AAAA', outgoingBlobB64: forward.outgoingBlobB64 }),
      400,
      'BAD_BLOB',
    );

    // From delta, ann's other access server, the pair is stored with its own delivery row.
    await using d = await serverSession(alpha(), delta);
    const answer = await d.call<{ outgoingKey: string; deliveryState: string }>(
      'ReceiveOutcomingMessage',
      wholePair(forward),
    );
    assert.equal(answer.outgoingKey, forward.outgoingKey);
    assert.equal(answer.deliveryState, 'accepted');
    assert.ok(await alpha().ctx.store.messages.getCopy(forward.outgoingKey));
    assert.ok(await alpha().ctx.store.delivery.getDelivery(forward.outgoingKey));
  });

  it('answers GetDmDeliveryStatus in single and batch form; an incoming key for its pair, an unknown key with known:false', async () => {
    const delivered = textPair(alice, 'ann'); // ann is local: the local copy counts as delivered
    assert.equal((await sendPair(aliceSession, delivered)).deliveryState, 'delivered');
    const pending = textPair(alice, 'carol'); // gamma cannot be reached
    assert.equal((await sendPair(aliceSession, pending)).deliveryState, 'accepted');
    const unknown = textPair(alice, 'carol');
    await using g = await serverSession(alpha(), gamma);
    // A delivered pair comes with its proof: here alpha's own receipt for ann's copy (docs/protocol.md §13.1).
    const proof = (await alpha().ctx.store.delivery.getDelivery(delivered.outgoingKey))!.proof!;
    assert.equal(proof.serverLogin, 'alpha');
    assert.equal(proof.messageKey, delivered.incomingKey);
    assert.equal(proof.containerSha256B64, containerSha256B64(delivered.incoming.bytes));
    assert.ok(verifyReceipt(proof, alpha().ctx.serverKey.publicKeyB64));

    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKey: delivered.outgoingKey }), {
      messageKey: delivered.outgoingKey,
      known: true,
      delivered: true,
      proof,
    });
    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKey: delivered.incomingKey }), {
      messageKey: delivered.incomingKey,
      known: true,
      delivered: true,
      proof,
    });
    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKey: pending.outgoingKey }), {
      messageKey: pending.outgoingKey,
      known: true,
      delivered: false,
    });
    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKey: unknown.outgoingKey }), {
      messageKey: unknown.outgoingKey,
      known: false,
      delivered: false,
    });
    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKey: 'not a key' }), {
      messageKey: 'not a key',
      known: false,
      delivered: false,
    });

    const keys = [delivered.outgoingKey, pending.incomingKey, unknown.incomingKey, delivered.incomingKey, 'x|y'];
    const batch = await g.call<{ items: DeliveryStatusItem[] }>('GetDmDeliveryStatus', { messageKeys: keys });
    assert.deepEqual(batch.items, [
      { messageKey: delivered.outgoingKey, known: true, delivered: true, proof },
      { messageKey: pending.incomingKey, known: true, delivered: false },
      { messageKey: unknown.incomingKey, known: false, delivered: false },
      { messageKey: delivered.incomingKey, known: true, delivered: true, proof },
      { messageKey: 'x|y', known: false, delivered: false },
    ]);
    assert.deepEqual(await g.call('GetDmDeliveryStatus', { messageKeys: [] }), { items: [] });
    assertError(await g.request('GetDmDeliveryStatus', {}), 400, 'EMPTY_MESSAGE_KEY');
    assertError(
      await g.request('GetDmDeliveryStatus', { messageKeys: Array.from({ length: 501 }, () => delivered.outgoingKey) }),
      400,
      'BAD_FIELDS',
    );
  });

  it('an incoming copy from the recipient’s other access server is outboxed as synced; only an authenticated one', async () => {
    // ann is on alpha and delta: what delta hands alpha for her, delta holds already.
    await using d = await serverSession(alpha(), delta);
    const before = await alpha().ctx.store.replication.outboxCounts('ann');
    await d.call('ReceiveIncomingMessage', incomingOnly(textPair(carol, 'ann')));
    assert.deepEqual(await alpha().ctx.store.replication.outboxCounts('ann'), {
      synced: before.synced + 1,
      unsynced: before.unsynced,
    });
    await using g = await serverSession(alpha(), gamma);
    await g.call('ReceiveIncomingMessage', incomingOnly(textPair(carol, 'ann')));
    assert.deepEqual(
      await alpha().ctx.store.replication.outboxCounts('ann'),
      { synced: before.synced + 1, unsynced: before.unsynced + 1 },
      'gamma is not ann’s server',
    );
    // With s2sAuth off a claim is trusted for routing, not for this: erin's row stays unsynced.
    await using c = await connectRaw(omega().wsUrl);
    const erinBefore = await omega().ctx.store.replication.outboxCounts('erin');
    await c.call('ReceiveIncomingMessage', incomingOnly(textPair(carol, 'erin'), { sourceServerLogin: 'delta' }));
    assert.deepEqual(await omega().ctx.store.replication.outboxCounts('erin'), {
      synced: erinBefore.synced,
      unsynced: erinBefore.unsynced + 1,
    });
  });

  it('with s2sAuth off, trusts sourceServerLogin without ServerAuth (and still checks who it names)', async () => {
    await using c = await connectRaw(omega().wsUrl);
    const m = textPair(carol, 'erin');
    const got = await c.call<{ messageKey: string }>(
      'ReceiveIncomingMessage',
      incomingOnly(m, { sourceServerLogin: 'gamma' }),
    );
    assert.equal(got.messageKey, m.incomingKey);
    assert.ok(await omega().ctx.store.messages.getCopy(m.incomingKey));

    const forward = textPair(erin, 'carol');
    assertError(
      await c.request('ReceiveOutcomingMessage', wholePair(forward, { sourceServerLogin: 'gamma' })),
      403,
      'NOT_PEER',
    );
    assertError(await c.request('ReceiveOutcomingMessage', wholePair(forward)), 403, 'NOT_PEER');
    await assertNothingStored(omega(), forward);
    const answer = await c.call<{ outgoingKey: string }>(
      'ReceiveOutcomingMessage',
      wholePair(forward, { sourceServerLogin: 'delta' }),
    );
    assert.equal(answer.outgoingKey, forward.outgoingKey);
    assert.ok(await omega().ctx.store.messages.getCopy(forward.outgoingKey));
    assert.deepEqual(await c.call('GetDmDeliveryStatus', { messageKey: forward.outgoingKey }), {
      messageKey: forward.outgoingKey,
      known: true,
      delivered: false,
    });
  });

  it('answers every server op with 500 LOCAL_SERVER_NOT_CONFIGURED on a server running as `local`', async () => {
    await using c = await connectRaw(local().wsUrl);
    const m = textPair(carol, 'alice');
    assertError(
      await c.request('ServerAuth', serverAuthPayload(gamma.seed, { from: 'gamma', to: 'local' })),
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assertError(
      await c.request('ReceiveIncomingMessage', incomingOnly(m, { sourceServerLogin: 'gamma' })),
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assertError(
      await c.request('ReceiveOutcomingMessage', wholePair(m, { sourceServerLogin: 'gamma' })),
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assertError(
      await c.request('GetDmDeliveryStatus', { messageKey: m.outgoingKey }),
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assert.equal(await local().ctx.store.messages.getCopy(m.incomingKey), null);
  });

  // Last: it restarts alpha, which ends the sessions opened in before().
  it('refuses a replayed ServerAuth (same signed payload) with 401, also after alpha restarts', async () => {
    const payload = serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha' });
    await using first = await connectRaw(alpha().wsUrl);
    assert.equal((await first.request('ServerAuth', payload)).ok, true);
    await using second = await connectRaw(alpha().wsUrl);
    assertError(await second.request('ServerAuth', payload), 401, 'AUTH_FAILED');
    assertError(
      await second.request('GetDmDeliveryStatus', { messageKey: 'alice|carol|1|1|2' }),
      401,
      'NOT_AUTHENTICATED',
    );

    await net.stop(0);
    await net.start(0);
    await using third = await connectRaw(alpha().wsUrl);
    assertError(await third.request('ServerAuth', payload), 401, 'AUTH_FAILED');
    const m = textPair(carol, 'alice');
    assertError(await third.request('ReceiveIncomingMessage', incomingOnly(m)), 401, 'NOT_AUTHENTICATED');
    await assertNothingStored(alpha(), m);
    // A fresh nonce from the same server is fine.
    assert.equal(
      (await third.request('ServerAuth', serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha' }))).ok,
      true,
    );
  });
});
