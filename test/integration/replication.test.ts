/**
 * Catch-up replication between a user's two access servers (docs/protocol.md §7), against real in-process servers:
 * alice on alpha1 + alpha2, bob on bravo. alpha2 is down while the dialog goes on; one cycle later it
 * holds what alpha1 holds, silently (docs/protocol.md §5.3), and nobody got anything twice (docs/protocol.md §6.8). Replication
 * runs only at start-up and on demand (POST /admin/sync).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { Clock } from '../../src/server/clock.js';
import { systemClock } from '../../src/server/clock.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { Pair, Ref } from '../helpers/replication.js';
import {
  answeredOk,
  deliveryRows,
  dmSnapshot,
  fullHistory,
  historyView,
  outboxCounts,
  pairOf,
  replicationServer,
  seedFor,
  sendAll,
  syncNow,
} from '../helpers/replication.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { queryServerDb } from '../helpers/test-db.js';
import { waitUntil } from '../helpers/wait.js';

const A1 = 0;
const A2 = 1;
const B = 2;
const alice = makeUser('alice', ['alpha1', 'alpha2'], seedFor('alice'));
const bob = makeUser('bob', ['bravo'], seedFor('bob'));

const directMessages = (c: RawClient) =>
  c.events.filter((e) => e.op === 'DirectMessage').map((e) => (e.payload as { messageKey: string }).messageKey);

describe('replication: catch-up of an access server that was down', () => {
  it('one cycle brings alpha2 level with alpha1 (edits, receipts, deletes, settings), silently, and re-sends nothing', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('alpha1'), replicationServer('alpha2'), replicationServer('bravo')],
    });
    const srv = (i: number) => net.servers[i]!;
    // alpha2 goes down before it ever hears of alice: it learns everything from the cycle below.
    await net.stop(A2);
    await using aliceA1 = await connectUser(srv(A1).wsUrl, alice, 'alice-a1');
    await using bobB = await connectUser(srv(B).wsUrl, bob, 'bob-b');

    const N = 500;
    const base = Date.now() - 3_600_000;
    const fromAlice: Ref[] = Array.from({ length: N }, (_, i) => ({
      from: 'alice',
      to: 'bob',
      timeMs: base + 2 * i,
      nonce: i,
    }));
    const fromBob: Ref[] = Array.from({ length: N }, (_, i) => ({
      from: 'bob',
      to: 'alice',
      timeMs: base + 2 * i + 1,
      nonce: i,
    }));
    const [aliceAnswers] = await Promise.all([
      sendAll(
        aliceA1,
        fromAlice.map((r) => ({ pair: pairOf(r) })),
      ),
      sendAll(
        bobB,
        fromBob.map((r) => ({ pair: pairOf(r) })),
      ),
    ]);
    // Most answers say `delivered` already; on a loaded machine a first attempt may end after its answer.
    const deliveredAtA1 = async () =>
      (
        await queryServerDb(
          srv(A1),
          `SELECT COUNT(*) AS n FROM dm_delivery_state WHERE sender_login = ? AND state = 'delivered'`,
          ['alice'],
        )
      )[0]!.n;
    await waitUntil(async () => (await deliveredAtA1()) === N, 30_000, 'every pair of alice’s delivered');

    // Receipts both ways (bob reads #12, which alice edits afterwards), then edits, deletes and a setting.
    const now = Date.now();
    let n = 100_000;
    const receipt = (reader: 'alice' | 'bob', target: Ref): Pair =>
      pairOf(
        { from: reader, to: target.from, timeMs: now, nonce: n++ },
        { kind: 'receipt', target, readAtMs: now - 1000 + n },
      );
    await sendAll(
      bobB,
      [12, 30, 31, 32, 33, 34].map((i) => ({ pair: receipt('bob', fromAlice[i]!) })),
    );
    await sendAll(
      aliceA1,
      [40, 41, 42, 43, 44].map((i) => ({ pair: receipt('alice', fromBob[i]!) })),
    );
    await sendAll(
      aliceA1,
      [10, 11, 12, 13, 14].map((i) => ({
        pair: pairOf({ ...fromAlice[i]!, revisionTimeMs: now + i }, { kind: 'text', text: `edited ${i}` }),
      })),
    );
    await sendAll(
      bobB,
      [20, 21, 22].map((i) => ({
        pair: pairOf({ ...fromBob[i]!, revisionTimeMs: now + i }, { kind: 'text', text: `bob edited ${i}` }),
      })),
    );
    await sendAll(aliceA1, [
      {
        op: 'DeleteMessage',
        pair: pairOf(
          { from: 'alice', to: 'bob', timeMs: now, nonce: n++ },
          { kind: 'deleteMessage', target: fromAlice[50]! },
        ),
      },
      {
        op: 'DeleteMessage',
        pair: pairOf(
          { from: 'alice', to: 'bob', timeMs: now, nonce: n++ },
          { kind: 'deleteMessage', target: fromBob[51]! },
        ),
      },
      // Everything up to alice #2 / bob #2 (timeMs ≤ base + 5) goes.
      {
        op: 'DeleteConversation',
        pair: pairOf(
          { from: 'alice', to: 'bob', timeMs: now, nonce: n++ },
          { kind: 'deleteConversation', deleteBeforeMs: base + 5 },
        ),
      },
    ]);
    await sendAll(bobB, [
      {
        op: 'DeleteMessage',
        pair: pairOf(
          { from: 'bob', to: 'alice', timeMs: now, nonce: n++ },
          { kind: 'deleteMessage', target: fromBob[52]! },
        ),
      },
    ]);
    await aliceA1.call('SetUserSetting', {
      key: 'theme',
      valueB64: toBase64(new Uint8Array([1, 2, 3])),
      updatedAtMs: now,
    });

    const before = await dmSnapshot(srv(A1), 'alice');
    const historyA1 = await fullHistory(aliceA1, 'bob');
    assert.equal(historyA1.length, 2 * N - 6 - 3, 'conversation delete took 6, message deletes 3');
    assert.equal(before.tombstones.length, 4);
    const unsynced = (await outboxCounts(srv(A1).httpUrl, 'alice')).unsynced;

    // Calls to the stopped alpha2 (bravo's deliveries, alpha1's forwards) wait out its reconnect
    // backoff before they fail; let that background work end first, so nothing reaches alpha2 live when it is back.
    await Promise.all([srv(A1).drain(), srv(B).drain()]);

    // alpha2 comes back; its start-up cycle finds no shared user yet (alice is new to it).
    await net.start(A2);
    await srv(A2).drain(); // its start-up cycle
    await using aliceA2 = await connectUser(srv(A2).wsUrl, alice, 'alice-a2');
    const bravoReceived = await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage');
    const bobEvents = bobB.events.length;

    const summary = await syncNow(srv(A2).httpUrl);
    assert.deepEqual(
      { ...summary, durationMs: 0 },
      {
        peers: 1,
        users: 1,
        dmRows: unsynced,
        settingsRows: 1,
        repairedCopies: 0,
        chainBlocksPulled: 0,
        chainResyncs: 0,
        errors: 0,
        durationMs: 0,
      },
    );

    // Level with alpha1: same copies (keys, revisions, read times, bytes), tombstones and settings.
    assert.deepEqual(await dmSnapshot(srv(A2), 'alice'), before);
    const historyA2 = await fullHistory(aliceA2, 'bob');
    assert.deepEqual(historyA2.map(historyView), historyA1.map(historyView));
    assert.deepEqual(
      historyA2.map((i) => i.deliveryState),
      historyA1.map((i) => i.deliveryState),
    );
    const edited = historyA2.find((i) => i.messageKey === aliceAnswers[12]!.outgoingKey);
    assert.ok(
      edited && edited.revisionTimeMs > 0 && edited.readAtMs !== null,
      'read before the edit, still read after it',
    );
    // Each of alice's copies has its outbox row on alpha1 (a pair's row is its outgoing copy's), all acked now.
    assert.equal(unsynced, before.copies.length);
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'alice'), { owner: 'alice', synced: unsynced, unsynced: 0 });

    // Nothing went to bob again: bravo was not called, alpha2 owns no pending delivery.
    assert.equal(await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage'), bravoReceived);
    assert.equal(bobB.events.length, bobEvents);
    assert.deepEqual(await deliveryRows(srv(A2).httpUrl, 'accepted'), []);
    assert.deepEqual(await deliveryRows(srv(A2).httpUrl, 'failed'), []);

    // Silent: alice's session on alpha2 saw no event of the cycle; the next live message is the first.
    // (bravo reaches alpha2 at once: alpha2 authenticated to it during the cycle, to import bob's profile.)
    const marker = pairOf({ from: 'bob', to: 'alice', timeMs: Date.now(), nonce: 1 }, { kind: 'text', text: 'marker' });
    await sendAll(bobB, [{ pair: marker }]);
    const markerKey = `${marker.baseKey}|1`;
    await aliceA2.waitFor(
      (f) => f.op === 'DirectMessage' && (f.payload as { messageKey: string }).messageKey === markerKey,
    );
    assert.deepEqual(directMessages(aliceA2), [markerKey]);
    await aliceA2.call('AckSessionDelivery', { messageKeys: [markerKey] });
    await aliceA2.close();

    // ... and not replayed at her next login on this device: only what arrived live meanwhile is.
    const marker2 = pairOf(
      { from: 'bob', to: 'alice', timeMs: Date.now(), nonce: 2 },
      { kind: 'text', text: 'marker 2' },
    );
    await sendAll(bobB, [{ pair: marker2 }]);
    const marker2Key = `${marker2.baseKey}|1`;
    await waitUntil(
      async () => (await dmSnapshot(srv(A2), 'alice')).copies.some((c) => c.key === marker2Key),
      5000,
      'marker 2 on alpha2',
    );
    await using again = await connectUser(srv(A2).wsUrl, alice, 'alice-a2');
    await again.waitFor(
      (f) => f.op === 'DirectMessage' && (f.payload as { messageKey: string }).messageKey === marker2Key,
    );
    assert.deepEqual(directMessages(again), [marker2Key]);

    // Every row was acked: the next cycle brings only the two markers, which bravo gave both servers
    // (alpha1's copies may still be on their way when alpha2's arrive).
    await waitUntil(
      async () => (await outboxCounts(srv(A1).httpUrl, 'alice')).unsynced === 2,
      10_000,
      'both markers on alpha1',
    );
    const second = await syncNow(srv(A2).httpUrl);
    assert.deepEqual([second.dmRows, second.settingsRows, second.errors], [2, 0, 0]);
    assert.equal(await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage'), bravoReceived);
  });

  it('synced pairs take their delivery state from the source: delivered there → delivered, past the hour → failed, else accepted (docs/protocol.md §6.8)', async () => {
    // One shared clock that the test can move two hours on; timers stay real.
    const clock: Clock & { offsetMs: number } = {
      offsetMs: 0,
      now: () => Date.now() + clock.offsetMs,
      setTimer: (ms, fn) => systemClock.setTimer(ms, fn),
    };
    // No worker ticks after start-up: delivery rows change only where the test looks.
    const quiet = { workerTickMs: 1_000_000_000 };
    await using net = await startNetwork({
      federate: true,
      clock,
      servers: [
        replicationServer('alpha1', quiet),
        replicationServer('alpha2', quiet),
        replicationServer('bravo', quiet),
      ],
    });
    const srv = (i: number) => net.servers[i]!;
    // alpha2 has pinned bravo's key (as after any contact), so it can check bravo's receipts (§13.1).
    assert.ok(await srv(A2).ctx.directory.lookupServer('bravo'));
    await net.stop(A2);
    await using aliceA1 = await connectUser(srv(A1).wsUrl, alice, 'alice-a1');
    await (await connectUser(srv(B).wsUrl, bob, 'bob-b')).close();
    const t = Date.now() - 60_000;
    const m = [0, 1, 2, 3].map((i) => pairOf({ from: 'alice', to: 'bob', timeMs: t + i, nonce: i }));
    const [delivered] = await sendAll(aliceA1, [{ pair: m[0]! }]);
    assert.equal(delivered!.deliveryState, 'delivered');
    await net.stop(B);
    const old = await sendAll(aliceA1, [{ pair: m[1]! }, { pair: m[2]! }]);
    assert.deepEqual(
      old.map((a) => a.deliveryState),
      ['accepted', 'accepted'],
    );
    clock.offsetMs += 2 * 3_600_000;
    const [young] = await sendAll(aliceA1, [{ pair: m[3]! }]);
    assert.equal(young!.deliveryState, 'accepted');
    const sourceRow = (await deliveryRows(srv(A1).httpUrl, 'accepted')).find(
      (r) => r.outgoingKey === m[3]!.outgoingKey,
    )!;
    // alpha1's forwards to the stopped alpha2 end first: only the sync cycle brings the pairs there.
    await srv(A1).drain();

    await net.start(A2);
    await srv(A2).drain(); // its start-up cycle
    await (await connectUser(srv(A2).wsUrl, alice, 'alice-a2')).close();
    const summary = await syncNow(srv(A2).httpUrl);
    assert.equal(summary.dmRows, 4);
    const keys = async (state: 'accepted' | 'delivered' | 'failed') =>
      (await deliveryRows(srv(A2).httpUrl, state)).map((r) => r.outgoingKey).sort();
    assert.deepEqual(await keys('delivered'), [m[0]!.outgoingKey]);
    // With bravo's receipt, which alpha1 passed on and alpha2 checked (decision 33).
    const proof = (await srv(A2).ctx.store.delivery.getDelivery(m[0]!.outgoingKey))!.proof;
    assert.ok(proof);
    assert.deepEqual(proof, (await srv(A1).ctx.store.delivery.getDelivery(m[0]!.outgoingKey))!.proof);
    assert.deepEqual(await keys('failed'), [m[1]!.outgoingKey, m[2]!.outgoingKey].sort());
    const [pending] = await deliveryRows(srv(A2).httpUrl, 'accepted');
    // Anchored at the source's storedAtMs (its acceptance), not at the moment of sync.
    assert.deepEqual(
      { key: pending?.outgoingKey, acceptedAtMs: pending?.acceptedAtMs, nextAttemptAtMs: pending?.nextAttemptAtMs },
      { key: m[3]!.outgoingKey, acceptedAtMs: sourceRow.acceptedAtMs, nextAttemptAtMs: sourceRow.acceptedAtMs },
    );
  });

  it("a synced pair to another user of the puller gets that user's own outbox row, synced only where the peer is that user's other server", async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('alpha1'), replicationServer('alpha2'), replicationServer('charlie')],
    });
    const C = 2;
    const srv = (i: number) => net.servers[i]!;
    const carol = makeUser('carol', ['alpha2', 'charlie'], seedFor('carol'));
    const dave = makeUser('dave', ['alpha1', 'alpha2'], seedFor('dave'));
    // Everyone is known on each of their servers; then alpha2 goes down.
    for (const [i, user] of [
      [A2, alice],
      [A2, carol],
      [C, carol],
      [A2, dave],
      [A1, dave],
    ] as const)
      await (await connectUser(srv(i).wsUrl, user, `${user.login}-${i}`)).close();
    await net.stop(A2);
    await using aliceA1 = await connectUser(srv(A1).wsUrl, alice, 'alice-a1');
    const t = Date.now() - 60_000;
    const toCarol = [0, 1, 2].map((i) => pairOf({ from: 'alice', to: 'carol', timeMs: t + i, nonce: i }));
    const toDave = [3, 4].map((i) => pairOf({ from: 'alice', to: 'dave', timeMs: t + i, nonce: i }));
    const answers = await sendAll(
      aliceA1,
      [...toCarol, ...toDave].map((pair) => ({ pair })),
    );
    assert.deepEqual(
      answers.map((a) => a.deliveryState),
      ['delivered', 'delivered', 'delivered', 'delivered', 'delivered'],
      'through charlie, or locally',
    );
    // The calls to the stopped alpha2 (deliveries, forwards) end before it is back: only sync brings the pairs.
    await srv(A1).drain();
    await net.start(A2);
    await srv(A2).drain(); // its start-up cycle
    assert.deepEqual(await outboxCounts(srv(A2).httpUrl, 'alice'), { owner: 'alice', synced: 5, unsynced: 0 });
    // alpha1 is not carol's server: alpha2's copies are news to her other server, charlie.
    assert.deepEqual(await outboxCounts(srv(A2).httpUrl, 'carol'), { owner: 'carol', synced: 0, unsynced: 3 });
    // alpha1 is dave's other server and holds his copies: nothing to send back.
    assert.deepEqual(await outboxCounts(srv(A2).httpUrl, 'dave'), { owner: 'dave', synced: 2, unsynced: 0 });

    await using carolC = await connectUser(srv(C).wsUrl, carol, 'carol-c');
    const summary = await syncNow(srv(C).httpUrl);
    assert.equal(summary.dmRows, 3, 'charlie stores them again, idempotently');
    assert.deepEqual(await outboxCounts(srv(A2).httpUrl, 'carol'), { owner: 'carol', synced: 3, unsynced: 0 });
    assert.equal((await fullHistory(carolC, 'alice')).length, 3, 'each once');
    assert.deepEqual(directMessages(carolC), [], 'synced copies raise no events');
  });
});
