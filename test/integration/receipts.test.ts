/**
 * Verifiable delivery (docs/protocol.md §13.1): the recipient's server signs a receipt for what it stored;
 * the sender's server counts a delivery only with a receipt that verifies and matches, keeps it and
 * serves it (history, events, GetDmDeliveryStatus), and the sender's other server takes `delivered`
 * only with that proof. Real servers on loopback; a fake recipient server where a hostile one is needed.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { ServerDescriptor } from '../../src/protocol/identity.js';
import type { DeliveryStateChangedEvent } from '../../src/protocol/ops.js';
import type { DeliveryReceipt } from '../../src/protocol/receipt.js';
import { containerSha256B64, verifyReceipt } from '../../src/protocol/receipt.js';
import type { RunningServer } from '../../src/server/app.js';
import { assertError } from '../helpers/assert.js';
import type { HoldingReceipt } from '../helpers/federation.js';
import {
  fastServer,
  adminSync,
  deliveryEvent,
  deliveryRow,
  fakeServer,
  history,
  opCount,
  sendPair,
  serverSession,
  startHoldingPeer,
  startPeerCheckNetwork,
  textPair,
  waitForRow,
} from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { connectRaw } from '../helpers/raw-client.js';
import { pairOf, seedFor } from '../helpers/replication.js';
import { queryServerDb, suiteConcurrency } from '../helpers/test-db.js';
import { connectUser, makeUser } from '../helpers/users.js';

const server = fastServer;

/** GetServerDescriptor on an anonymous socket, as a client checking a proof would ask. */
async function descriptorOf(on: RunningServer, serverLogin: string): Promise<ServerDescriptor> {
  await using c = await connectRaw(on.wsUrl);
  return (await c.call<{ descriptor: ServerDescriptor }>('GetServerDescriptor', { serverLogin })).descriptor;
}

/** Asserts that proof is `signer`'s receipt for the incoming copy with these bytes, by the descriptor `on` serves. */
async function assertProof(
  proof: DeliveryReceipt | null | undefined,
  on: RunningServer,
  signer: string,
  incoming: { bytes: Uint8Array; revisionTimeMs: number },
  incomingKey: string,
): Promise<void> {
  assert.ok(proof, 'a proof is kept');
  assert.equal(proof.serverLogin, signer);
  assert.equal(proof.messageKey, incomingKey);
  assert.equal(proof.revisionTimeMs, incoming.revisionTimeMs);
  assert.equal(proof.containerSha256B64, containerSha256B64(incoming.bytes));
  assert.ok(verifyReceipt(proof, (await descriptorOf(on, signer)).signKeyB64), 'the proof verifies');
}

describe('verifiable delivery (§13.1)', { concurrency: suiteConcurrency() }, () => {
  it('a) a recipient server that answers 2xx without a valid receipt: the row stays accepted and ends failed (BAD_RECEIPT); a valid one delivers', async () => {
    await using peer = await startHoldingPeer('bravo');
    peer.autoAnswer = true;
    const bob = makeUser('bob', ['bravo']);
    const dir = await mkdtemp(join(tmpdir(), 'shine-receipts-'));
    try {
      const directoryFile = join(dir, 'directory.json');
      await writeFile(directoryFile, JSON.stringify({ servers: [peer.identity.descriptor], users: [bob.profile] }));
      await using net = await startNetwork({ servers: [server('alpha', { directoryFile })] });
      const alpha = net.servers[0]!;
      const alice = makeUser('alice', ['alpha']);
      await using a = await connectUser(alpha.wsUrl, alice);

      for (const mode of ['none', 'otherHash', 'otherKey'] satisfies HoldingReceipt[]) {
        peer.receipt = mode;
        const calls = peer.calls;
        const m = textPair(alice, 'bob');
        assert.equal((await sendPair(a, m)).deliveryState, 'accepted', `${mode}: the 2xx is not a delivery`);
        const afterFirst = (await deliveryRow(alpha, m.outgoingKey))!;
        assert.equal(afterFirst.state, 'accepted');
        assert.match(afterFirst.lastError ?? '', /^bravo: BAD_RECEIPT/, `${mode}: ${afterFirst.lastError}`);
        const failed = await deliveryEvent(a, m.outgoingKey, 'failed');
        assert.equal((failed.payload as DeliveryStateChangedEvent).deliveryProof, undefined);
        const row = (await deliveryRow(alpha, m.outgoingKey))!;
        assert.deepEqual([row.state, row.proof], ['failed', null]);
        assert.match(row.lastError ?? '', /BAD_RECEIPT/);
        assert.ok(peer.calls >= calls + 2, `${mode}: the retries called bravo again`);
        const [item] = (await history(a, 'bob')).filter((i) => i.messageKey === m.outgoingKey);
        assert.deepEqual([item?.deliveryState, item?.deliveryProof], ['failed', undefined]);
      }

      peer.receipt = 'valid';
      const m = textPair(alice, 'bob');
      assert.equal((await sendPair(a, m)).deliveryState, 'delivered');
      const row = (await deliveryRow(alpha, m.outgoingKey))!;
      assert.deepEqual([row.state, row.lastError], ['delivered', null]);
      await assertProof(row.proof, alpha, 'bravo', m.incoming, m.incomingKey);
      assert.deepEqual(await descriptorOf(alpha, 'bravo'), peer.identity.descriptor);
      const [item] = (await history(a, 'bob')).filter((i) => i.messageKey === m.outgoingKey);
      assert.deepEqual(item?.deliveryProof, row.proof, 'history carries the proof');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a) a real recipient server: delivered with a proof that verifies against GetServerDescriptor; the event of a later delivery carries it', async () => {
    // Retries every 0.3 s for 6 s: a restart of beta falls well within them.
    const retryScheduleMs = Array.from({ length: 21 }, (_, i) => i * 300).join(',');
    await using net = await startNetwork({
      federate: true,
      servers: [server('alpha', { retryScheduleMs }), server('beta')],
    });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['beta']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await (await connectUser(net.servers[1]!.wsUrl, bob)).close();

    const m1 = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m1)).deliveryState, 'delivered');
    const proof1 = (await deliveryRow(alpha, m1.outgoingKey))!.proof;
    await assertProof(proof1, alpha, 'beta', m1.incoming, m1.incomingKey);
    // beta's own descriptor and alpha's pinned one are the same.
    assert.deepEqual(await descriptorOf(alpha, 'beta'), await descriptorOf(net.servers[1]!, 'beta'));
    assert.equal(proof1!.storedAtMs, (await net.servers[1]!.ctx.store.messages.getCopy(m1.incomingKey))!.storedAtMs);

    // Delivered later, by the worker: the event carries the proof, and so does the history.
    await net.stop(1);
    const m2 = textPair(alice, 'bob');
    assert.equal((await sendPair(a, m2)).deliveryState, 'accepted');
    await net.start(1);
    const event = (await deliveryEvent(a, m2.outgoingKey, 'delivered')).payload as DeliveryStateChangedEvent;
    await assertProof(event.deliveryProof, alpha, 'beta', m2.incoming, m2.incomingKey);
    const items = await history(a, 'bob');
    assert.deepEqual(items.find((i) => i.messageKey === m2.outgoingKey)?.deliveryProof, event.deliveryProof);
    assert.deepEqual(items.find((i) => i.messageKey === m1.outgoingKey)?.deliveryProof, proof1);

    // An edit restarts the row: the old revision's proof is not shown for the new one until it is delivered.
    await net.stop(1);
    const edit = textPair(alice, 'bob', { timeMs: m1.timeMs, nonce: m1.nonce, revisionTimeMs: m1.timeMs + 1 });
    assert.equal((await sendPair(a, edit)).deliveryState, 'accepted');
    const edited = (await history(a, 'bob')).find((i) => i.messageKey === m1.outgoingKey);
    assert.deepEqual([edited?.revisionTimeMs, edited?.deliveryProof], [m1.timeMs + 1, undefined]);
    await net.start(1);
    const e2 = (await deliveryEvent(a, m1.outgoingKey, 'delivered')).payload as DeliveryStateChangedEvent;
    await assertProof(e2.deliveryProof, alpha, 'beta', edit.incoming, edit.incomingKey);
  });

  it('a local delivery carries this server’s own receipt, in the history and by GetServerDescriptor of itself', async () => {
    await using net = await startNetwork({ servers: [server('alpha')] });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const ann = makeUser('ann', ['alpha']);
    await using a = await connectUser(alpha.wsUrl, alice);
    await using b = await connectUser(alpha.wsUrl, ann);
    const m = textPair(alice, 'ann');
    assert.equal((await sendPair(a, m)).deliveryState, 'delivered');
    const [item] = (await history(a, 'ann')).filter((i) => i.messageKey === m.outgoingKey);
    await assertProof(item?.deliveryProof, alpha, 'alpha', m.incoming, m.incomingKey);
    assert.equal(item!.deliveryProof!.storedAtMs, (await alpha.ctx.store.messages.getCopy(m.incomingKey))!.storedAtMs);
    // The recipient's own history has no proofs: only type-2 items carry one.
    const [theirs] = (await history(b, 'alice')).filter((i) => i.messageKey === m.incomingKey);
    assert.deepEqual([theirs?.messageType, theirs?.deliveryProof], [1, undefined]);
  });

  it('a recipient on the sender’s other server: that server proves the pair it takes by forward with the receipt it gave for the copy', async () => {
    await using net = await startNetwork({ federate: true, servers: [server('alpha1'), server('alpha2')] });
    const [alpha1, alpha2] = [net.servers[0]!, net.servers[1]!];
    const alice = makeUser('alice', ['alpha1', 'alpha2']);
    await using a1 = await connectUser(alpha1.wsUrl, alice);
    await (await connectUser(alpha2.wsUrl, alice)).close();
    await (await connectUser(alpha2.wsUrl, makeUser('bob', ['alpha2']))).close();
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, m)).deliveryState, 'delivered');
    const proof = (await deliveryRow(alpha1, m.outgoingKey))!.proof;
    await assertProof(proof, alpha1, 'alpha2', m.incoming, m.incomingKey);
    // alpha2 stored bob's copy (ReceiveIncomingMessage) and the pair (ReceiveOutcomingMessage): its own
    // proof names the same copy and verifies. Usually it is the very receipt alpha1 holds; when the two
    // calls race (seen on PostgreSQL), it carries the forward's storedAtMs instead (decision 35).
    const row2 = await waitForRow(alpha2, m.outgoingKey, (r) => r.proof !== null);
    assert.equal(row2.state, 'delivered');
    await assertProof(row2.proof, alpha2, 'alpha2', m.incoming, m.incomingKey);
  });

  it('GetServerDescriptor: any socket; 404 SERVER_NOT_FOUND when unknown, 400 BAD_FIELDS without a login; nothing pinned by asking', async () => {
    await using net = await startNetwork({ servers: [server('alpha')] });
    const alpha = net.servers[0]!;
    await using c = await connectRaw(alpha.wsUrl);
    const own = await c.call<{ descriptor: ServerDescriptor }>('GetServerDescriptor', { serverLogin: 'alpha' });
    assert.deepEqual(own.descriptor, alpha.ctx.directory.selfDescriptor());
    assert.equal(own.descriptor.signKeyB64, alpha.ctx.serverKey.publicKeyB64);
    assertError(await c.request('GetServerDescriptor', { serverLogin: 'nosuch' }), 404, 'SERVER_NOT_FOUND');
    assert.equal(await alpha.ctx.store.directory.getServer('nosuch'), null, 'asking pins nothing');
    assertError(await c.request('GetServerDescriptor', { serverLogin: '' }), 400, 'BAD_FIELDS');
    assertError(await c.request('GetServerDescriptor', {}), 400, 'BAD_FIELDS');
    assert.deepEqual(
      (await alpha.ctx.store.directory.listServers()).map((s) => s.descriptor.serverLogin),
      ['alpha'],
      'nothing changed',
    );
  });

  it('ReceiveIncomingMessage signs the copy as stored: the same receipt again on a re-delivery, the stored newer revision’s for an old one, none behind a tombstone', async () => {
    const gamma = fakeServer('gamma');
    const carol = makeUser('carol', ['gamma'], seedFor('carol'));
    const dir = await mkdtemp(join(tmpdir(), 'shine-receipts-'));
    try {
      const directoryFile = join(dir, 'directory.json');
      await writeFile(directoryFile, JSON.stringify({ servers: [gamma.descriptor], users: [carol.profile] }));
      await using net = await startNetwork({ servers: [server('beta', { directoryFile })] });
      const beta = net.servers[0]!;
      await (await connectUser(beta.wsUrl, makeUser('bob', ['beta'], seedFor('bob')))).close();
      await using g = await serverSession(beta, gamma);
      const receive = async (incomingBlobB64: string) =>
        (await g.call<{ receipt?: DeliveryReceipt }>('ReceiveIncomingMessage', { incomingBlobB64 })).receipt;

      const ref = { from: 'carol', to: 'bob', timeMs: Date.now() - 5_000, nonce: 7 };
      const m = pairOf(ref);
      const first = await receive(m.incomingBlobB64);
      await assertProof(first, beta, 'beta', m.incoming, `${m.baseKey}|1`);
      assert.deepEqual(await receive(m.incomingBlobB64), first, 'a re-delivery gets the same receipt');

      const edit = pairOf({ ...ref, revisionTimeMs: ref.timeMs + 1 });
      const edited = await receive(edit.incomingBlobB64);
      await assertProof(edited, beta, 'beta', edit.incoming, `${m.baseKey}|1`);
      // The old revision again: the receipt names what is stored (the edit), so it proves nothing for the old one.
      assert.deepEqual(await receive(m.incomingBlobB64), edited);

      const del = pairOf({ ...ref, nonce: 8, timeMs: ref.timeMs + 2 }, { kind: 'deleteMessage', target: ref });
      await receive(del.incomingBlobB64);
      assert.equal(await beta.ctx.store.messages.getCopy(`${m.baseKey}|1`), null, 'deleted');
      assert.equal(await receive(edit.incomingBlobB64), undefined, 'a copy a tombstone refuses gets no receipt');
      assert.equal(await beta.ctx.store.messages.getCopy(`${m.baseKey}|1`), null, 'and is not stored');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('b) alice on alpha1+alpha2: alpha2 takes `delivered` from alpha1 by sync only with a proof that checks, and holds the same proof', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [
        server('alpha1'),
        // alpha2's own attempts come late: what it shows first is what it took from alpha1.
        server('alpha2', { retryScheduleMs: '0,60000,120000' }),
        server('beta'),
      ],
    });
    const [alpha1, beta] = [net.servers[0]!, net.servers[2]!];
    const alpha2 = (): RunningServer => net.servers[1]!;
    const alice = makeUser('alice', ['alpha1', 'alpha2']);
    const bob = makeUser('bob', ['beta']);
    await using a1 = await connectUser(alpha1.wsUrl, alice, 'laptop');
    await (await connectUser(alpha2().wsUrl, alice, 'phone')).close();
    await (await connectUser(beta.wsUrl, bob)).close();
    // alpha2 has pinned beta's key (as after any contact).
    assert.ok(await alpha2().ctx.directory.lookupServer('beta'));
    await net.stop(1);

    const good = textPair(alice, 'bob');
    const forged = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, good)).deliveryState, 'delivered');
    assert.equal((await sendPair(a1, forged)).deliveryState, 'delivered');
    const proof = (await deliveryRow(alpha1, good.outgoingKey))!.proof;
    await assertProof(proof, alpha1, 'beta', good.incoming, good.incomingKey);
    // forged's proof on alpha1 is made to name other bytes, as a buggy or hostile partner would pass it on.
    const bad = {
      ...(await deliveryRow(alpha1, forged.outgoingKey))!.proof!,
      containerSha256B64: proof!.containerSha256B64,
    };
    await queryServerDb(alpha1, 'UPDATE dm_delivery_state SET receipt_json = ? WHERE outgoing_key = ?', [
      JSON.stringify(bad),
      forged.outgoingKey,
    ]);

    const callsBefore = await opCount(beta, 'ReceiveIncomingMessage');
    await net.start(1);
    await adminSync(alpha2());
    const taken = (await deliveryRow(alpha2(), good.outgoingKey))!;
    assert.equal(taken.state, 'delivered');
    assert.deepEqual(taken.proof, proof, 'alpha2 holds the identical proof');
    await using a2 = await connectUser(alpha2().wsUrl, alice, 'phone');
    const items = await history(a2, 'bob');
    assert.deepEqual(items.find((i) => i.messageKey === good.outgoingKey)?.deliveryProof, proof);

    // A `delivered` whose proof does not check is not taken: alpha2 delivers itself, with beta's own receipt.
    const row = await waitForRow(alpha2(), forged.outgoingKey, (r) => r.state === 'delivered');
    // At least once: alpha1's forward of the pair to alpha2 (docs/protocol.md §6.3), which waited for alpha2's redial
    // while it was down, may land after the restart beside the sync, and start a first attempt of alpha2's own.
    const calls = await opCount(beta, 'ReceiveIncomingMessage');
    assert.ok(calls >= callsBefore + 1, `alpha2 called beta for it (${calls - callsBefore} calls)`);
    await assertProof(row.proof, alpha2(), 'beta', forged.incoming, forged.incomingKey);
    assert.notDeepEqual(row.proof, bad);
  });

  it('b) alice on alpha1+alpha2: alpha1’s peer check does not take `delivered` from alpha2 without a valid proof', async () => {
    // The taking with a valid proof: federation.test.ts, e). Here alpha2's proof is broken first.
    await using setting = await startPeerCheckNetwork();
    const { net, alpha1, alpha2, clock1, alice, a1 } = setting;
    const m = textPair(alice, 'bob');
    assert.equal((await sendPair(a1, m)).deliveryState, 'accepted');
    // alpha2 gets the pair by forward and delivers it once beta is back.
    await waitForRow(alpha2, m.outgoingKey, () => true);
    const beta = await net.start(2);
    const proof = (await waitForRow(alpha2, m.outgoingKey, (r) => r.state === 'delivered')).proof;
    await assertProof(proof, alpha2, 'beta', m.incoming, m.incomingKey);
    // alpha2's proof is made to name other bytes, as a buggy or hostile partner would answer.
    const bad = { ...proof!, containerSha256B64: containerSha256B64(new Uint8Array(1)) };
    await queryServerDb(alpha2, 'UPDATE dm_delivery_state SET receipt_json = ? WHERE outgoing_key = ?', [
      JSON.stringify(bad),
      m.outgoingKey,
    ]);
    const callsBefore = await opCount(beta, 'ReceiveIncomingMessage');
    const checksBefore = await opCount(alpha2, 'GetDmDeliveryStatus');

    clock1.advance(400);
    await deliveryEvent(a1, m.outgoingKey, 'delivered');
    assert.equal(await opCount(alpha2, 'GetDmDeliveryStatus'), checksBefore + 1, 'alpha1 asked alpha2');
    assert.equal(await opCount(beta, 'ReceiveIncomingMessage'), callsBefore + 1, 'then called beta itself');
    const row = (await deliveryRow(alpha1, m.outgoingKey))!;
    assert.deepEqual([row.state, row.attempt], ['delivered', 2]);
    await assertProof(row.proof, alpha1, 'beta', m.incoming, m.incomingKey);
    assert.deepEqual(row.proof, proof, 'beta signs its stored copy the same way again');
  });
});
