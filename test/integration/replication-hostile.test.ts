/**
 * The puller trusts no row blindly: a peer that hands over rows of other owners, or rows that do not
 * verify, gets them refused one by one — they are not stored and not acked — while the owner's other
 * rows are stored and replication goes on. The bad rows are planted in alpha1's outbox directly, as a
 * buggy or hostile peer would serve them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeContainer } from '../../src/protocol/container.js';
import { receiptFor } from '../../src/server/delivery/receipts.js';
import { packBlobs } from '../../src/server/store/blobs.js';
import { outboxTimeMs } from '../../src/server/store/rules.js';
import { startNetwork } from '../helpers/network.js';
import {
  metricValue,
  outboxCounts,
  pairOf,
  replicationServer,
  seedFor,
  sendAll,
  syncNow,
} from '../helpers/replication.js';
import { queryServerDb } from '../helpers/test-db.js';
import { connectUser, makeUser } from '../helpers/users.js';

/**
 * alice on alpha1 and alpha2, both known to each; `others` registered on alpha1; alice's session on
 * alpha1 open. Disposing it closes the session and the network.
 */
async function aliceOnTwoReplicas(others: string[]) {
  const net = await startNetwork({
    federate: true,
    servers: [replicationServer('alpha1'), replicationServer('alpha2')],
  });
  const [a1, a2] = [net.servers[0]!, net.servers[1]!];
  const alice = makeUser('alice', ['alpha1', 'alpha2'], seedFor('alice'));
  const aliceA1 = await connectUser(a1.wsUrl, alice, 'alice-a1');
  for (const login of others) await (await connectUser(a1.wsUrl, makeUser(login, ['alpha1'], seedFor(login)))).close();
  await (await connectUser(a2.wsUrl, alice, 'alice-a2')).close();
  return {
    a1,
    a2,
    aliceA1,
    async [Symbol.asyncDispose]() {
      await aliceA1.close();
      await net.close();
    },
  };
}

describe('replication: rows the owner does not own, or that do not verify', () => {
  it('are skipped and left unacked; the rest of the page is stored', async () => {
    await using net = await aliceOnTwoReplicas(['carol', 'dave']);
    const { a1, a2, aliceA1 } = net;

    const t = Date.now() - 10_000;
    const good = [1, 2, 3].map((nonce) => pairOf({ from: 'alice', to: 'carol', timeMs: t + nonce, nonce }));
    await sendAll(
      aliceA1,
      good.map((pair) => ({ pair })),
    );

    // Planted in alice's outbox on alpha1: carol's pair to dave (genuine, but not alice's), and a pair
    // of alice's whose signature is broken.
    const foreign = pairOf({ from: 'carol', to: 'dave', timeMs: t + 10, nonce: 10 });
    const broken = pairOf({ from: 'alice', to: 'carol', timeMs: t + 11, nonce: 11 });
    const tampered = broken.outgoing.bytes.slice();
    tampered[tampered.length - 1]! ^= 1;
    const plant = (primaryKey: string, blobs: Uint8Array[], storedAtMs: number) =>
      queryServerDb(
        a1,
        `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
        [
          'alice',
          primaryKey,
          `${primaryKey}:0:0`,
          storedAtMs,
          Buffer.from(packBlobs(blobs)),
          false,
          outboxTimeMs(primaryKey),
        ],
      );
    await plant(foreign.outgoingKey, [foreign.incoming.bytes, foreign.outgoing.bytes], 1);
    await plant(broken.outgoingKey, [broken.incoming.bytes, tampered], 2);

    const summary = await syncNow(a2.httpUrl);
    assert.equal(summary.dmRows, good.length, 'the good rows are stored');
    // Refused once each: the cycle's second pass from the start (which finds them unsynced) passes them over.
    assert.equal(await metricValue(a2.httpUrl, 'sync_errors_total', 'peer="alpha1"'), 2);
    for (const p of good) assert.ok(await a2.ctx.store.messages.getCopy(p.outgoingKey), `${p.outgoingKey} on alpha2`);
    assert.equal(
      await a2.ctx.store.messages.getCopy(foreign.outgoingKey),
      null,
      'a pair of another owner is not stored',
    );
    assert.equal(await a2.ctx.store.messages.getCopy(`${foreign.baseKey}|1`), null);
    assert.equal(await a2.ctx.store.delivery.getDelivery(foreign.outgoingKey), null, 'nor delivered from here');
    assert.equal(
      await a2.ctx.store.messages.getCopy(broken.outgoingKey),
      null,
      'a row that does not verify is not stored',
    );
    // The refused rows stay unsynced on alpha1 (not acked); the good ones were acked.
    assert.deepEqual(await outboxCounts(a1.httpUrl, 'alice'), { owner: 'alice', synced: good.length, unsynced: 2 });
  });

  it('a pair that does not verify is refused even when the peer says delivered with a valid proof', async () => {
    // The page's delivery status is asked, and its proofs checked, while its signatures are checked
    // (docs/protocol.md §7): a proof of a row refused for its signature must not bring the row in.
    await using net = await aliceOnTwoReplicas(['carol']);
    const { a1, a2, aliceA1 } = net;

    const t = Date.now() - 10_000;
    const good = pairOf({ from: 'alice', to: 'carol', timeMs: t, nonce: 1 });
    await sendAll(aliceA1, [{ pair: good }]);
    // Stored on alpha1 as delivered, with alpha1's genuine receipt for the (intact) incoming copy, but
    // with the outgoing copy's signature broken.
    const broken = pairOf({ from: 'alice', to: 'carol', timeMs: t + 1, nonce: 2 });
    const tampered = broken.outgoing.bytes.slice();
    tampered[tampered.length - 1]! ^= 1;
    const sign = (text: string): string => a1.ctx.serverKey.sign(text);
    const incomingKey = `${broken.baseKey}|1`;
    const proof = receiptFor('alpha1', sign, { ...broken.incoming, messageKey: incomingKey, storedAtMs: t + 1 });
    await a1.ctx.store.messages.storePair({
      incoming: broken.incoming,
      outgoing: decodeContainer(tampered),
      nowMs: Date.now(),
      outbox: { owners: new Map([['alice', false]]) },
      delivery: { state: 'delivered', attempt: 1, acceptedAtMs: t + 1, nextAttemptAtMs: null, proof },
    });

    const summary = await syncNow(a2.httpUrl);
    assert.equal(summary.dmRows, 1, 'only the good pair is stored');
    assert.equal((await a2.ctx.store.delivery.getDelivery(good.outgoingKey))?.state, 'delivered');
    assert.equal(await a2.ctx.store.messages.getCopy(broken.outgoingKey), null, 'the broken pair is not stored');
    assert.equal(await a2.ctx.store.messages.getCopy(incomingKey), null);
    assert.equal(await a2.ctx.store.delivery.getDelivery(broken.outgoingKey), null, 'nor its delivery row');
    // Refused (and counted) by every cycle that meets it: the one asked for here, and any other cycle
    // that ran meanwhile.
    assert.ok((await metricValue(a2.httpUrl, 'sync_errors_total', 'peer="alpha1"')) >= 1);
  });
});
