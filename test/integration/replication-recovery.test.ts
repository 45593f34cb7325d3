/**
 * Replication under failure (docs/protocol.md §6 "any process may die between any two steps", §7):
 *
 * - A puller killed between storing a page and acking it. alpha1 and alpha2 run as real `shine serve`
 *   processes; alpha1 publishes a relay (test/helpers/ws-proxy.ts) as its wsUrl, so alpha2's puller
 *   reaches it through the relay. A puller sends a page's ACK only with a request that leaves after
 *   every row of the page has committed; the relay holds back the first request that carries an ACK,
 *   and the test then SIGKILLs alpha2. So the page is on alpha2's disk and alpha1 never saw the ACK —
 *   the exact window the brief asks about, reached without timing luck.
 * - A server that lost its database, rebuilt by POST /admin/mark-unsynced on its peer and one cycle.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { Ref } from '../helpers/replication.js';
import {
  ADMIN_TOKEN,
  adminCall,
  answeredOk,
  deliveryRows,
  dmSnapshot,
  dmSnapshotOfDb,
  fullHistory,
  historyView,
  outboxCounts,
  pairOf,
  replicationServer,
  seedFor,
  sendAll,
  syncNow,
} from '../helpers/replication.js';
import { freePort, startServerProcess } from '../helpers/server-process.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { callsToPeerEnded } from '../helpers/metrics.js';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';

const alice = makeUser('alice', ['alpha1', 'alpha2'], seedFor('alice'));
const directMessages = (c: RawClient) =>
  c.events.filter((e) => e.op === 'DirectMessage').map((e) => (e.payload as { messageKey: string }).messageKey);

describe('replication: recovery', () => {
  it('a puller SIGKILLed after storing a page and before its ACK gets the page again and stores it once', async () => {
    const [port1, port2] = await Promise.all([freePort(), freePort()]);
    await using relay = await startWsProxy(`ws://127.0.0.1:${port1}/ws`);
    const dir = mkdtempSync(join(tmpdir(), 'shine-replication-'));
    const configFile = join(dir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ rateLimit: { perSecond: 1_000_000, burst: 1_000_000 } }));
    const env = {
      SHINE_CONFIG_FILE: configFile,
      SHINE_ADMIN_TOKEN: ADMIN_TOKEN,
      SHINE_SYNC_INTERVAL_MS: '1000000000',
      SHINE_LOG_LEVEL: 'error',
    };
    await using a1 = await startServerProcess({
      port: port1,
      env: {
        ...env,
        SHINE_SERVER_LOGIN: 'alpha1',
        SHINE_PUBLIC_WS_URL: relay.wsUrl,
        SHINE_PEERS: `alpha2=ws://127.0.0.1:${port2}/ws`,
      },
    });
    await using a2 = await startServerProcess({
      port: port2,
      env: { ...env, SHINE_SERVER_LOGIN: 'alpha2', SHINE_PEERS: `alpha1=ws://127.0.0.1:${port1}/ws` },
    });
    try {
      await (await connectUser(a2.wsUrl, alice, 'alice-a2')).close();
      await a2.kill('SIGTERM');
      await using aliceA1 = await connectUser(a1.wsUrl, alice, 'alice-a1');
      await (await connectUser(a1.wsUrl, makeUser('bob', ['alpha1'], seedFor('bob')), 'bob-a1')).close();
      const N = 1000; // two pages of 500
      const t = Date.now() - 600_000;
      await sendAll(
        aliceA1,
        Array.from({ length: N }, (_, i) => ({ pair: pairOf({ from: 'alice', to: 'bob', timeMs: t + i, nonce: i }) })),
      );
      // alpha1 forwards each pair to the stopped alpha2 (ReceiveOutcomingMessage); those calls wait out
      // its reconnect backoff before they fail. Let them end, so that only the puller brings rows.
      await callsToPeerEnded(a1.httpUrl, 'alpha2');

      // Pages alpha1 serves, and the first request that carries an ACK (held back, never delivered).
      const served: string[][] = [];
      relay.onAnswer = (f) => {
        const items = (f?.payload as { items?: { syncId: string }[] } | undefined)?.items;
        if (f?.op === 'DmSyncBatch' && items && items.length > 0) served.push(items.map((i) => i.syncId));
      };
      let held: string[] | null = null;
      relay.filter = (f) => {
        const acks = f?.payload?.ackSyncIds as string[] | undefined;
        if (held === null && f?.op === 'DmSyncBatch' && acks && acks.length > 0) {
          held = acks;
          return 'hold';
        }
        return 'pass';
      };
      // Its start-up cycle pulls page 1 and, as it arrives, already asks for page 2 (no ACK yet); the first
      // request sent after page 1 committed carries page 1's ACK (and page 2's, if that committed too).
      await a2.restart();
      await waitUntil(() => held !== null, 20_000, 'the ACK of page 1');
      await a2.kill('SIGKILL');

      const page1 = served[0]!;
      assert.equal(served.length, 2, 'page 2 was asked for before page 1 was acked');
      assert.deepEqual(held!.slice(0, page1.length), page1, "page 1's ACK first");
      const crashed = await dmSnapshotOfDb(a2.dbUrl, 'alice');
      // Page 2 may or may not have been stored too before the kill.
      assert.ok(crashed.copies.length >= 500, 'page 1 was on disk before its ACK left');
      assert.deepEqual(await outboxCounts(a1.httpUrl, 'alice'), { owner: 'alice', synced: 0, unsynced: N });

      // Back up, relay open: the start-up cycle gets page 1 again and finishes.
      relay.filter = () => 'pass';
      await a2.restart();
      await waitUntil(async () => (await outboxCounts(a1.httpUrl, 'alice')).unsynced === 0, 20_000, 'every row acked');
      assert.deepEqual(served[2], page1, 'the unacked page came again');
      assert.equal(served.flat().length, 2 * N, 'both pages came again, and nothing else');

      await using aliceA2 = await connectUser(a2.wsUrl, alice, 'alice-a2');
      assert.deepEqual(
        (await fullHistory(aliceA2, 'bob')).map(historyView),
        (await fullHistory(aliceA1, 'bob')).map(historyView),
      );
      await aliceA2.close();
      await a2.kill('SIGTERM');
      const done = await dmSnapshotOfDb(a2.dbUrl, 'alice');
      assert.equal(done.copies.length, N);
      // Stored once: the second delivery of page 1 left its rows exactly as the first one wrote them.
      for (const [key, storedAtMs] of crashed.storedAtMs) assert.equal(done.storedAtMs.get(key), storedAtMs, key);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a server that lost its database is rebuilt by mark-unsynced on its peer and one cycle; nobody gets an old message again', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('alpha1'), replicationServer('alpha2'), replicationServer('bravo')],
    });
    const [A1, A2, B] = [0, 1, 2];
    const srv = (i: number) => net.servers[i]!;
    const bob = makeUser('bob', ['bravo'], seedFor('bob'));
    await (await connectUser(srv(A2).wsUrl, alice, 'alice-a2')).close();
    await using aliceA1 = await connectUser(srv(A1).wsUrl, alice, 'alice-a1');
    await using bobB = await connectUser(srv(B).wsUrl, bob, 'bob-b');
    const t = Date.now() - 600_000;
    const fromAlice: Ref[] = Array.from({ length: 40 }, (_, i) => ({
      from: 'alice',
      to: 'bob',
      timeMs: t + 2 * i,
      nonce: i,
    }));
    const fromBob: Ref[] = Array.from({ length: 40 }, (_, i) => ({
      from: 'bob',
      to: 'alice',
      timeMs: t + 2 * i + 1,
      nonce: i,
    }));
    await Promise.all([
      sendAll(
        aliceA1,
        fromAlice.map((r) => ({ pair: pairOf(r) })),
      ),
      sendAll(
        bobB,
        fromBob.map((r) => ({ pair: pairOf(r) })),
      ),
    ]);
    const now = Date.now();
    await sendAll(bobB, [
      {
        pair: pairOf(
          { from: 'bob', to: 'alice', timeMs: now, nonce: 900 },
          { kind: 'receipt', target: fromAlice[3]!, readAtMs: now },
        ),
      },
    ]);
    await sendAll(aliceA1, [
      { pair: pairOf({ ...fromAlice[5]!, revisionTimeMs: now }, { kind: 'text', text: 'edited' }) },
      {
        op: 'DeleteMessage',
        pair: pairOf(
          { from: 'alice', to: 'bob', timeMs: now, nonce: 901 },
          { kind: 'deleteMessage', target: fromAlice[7]! },
        ),
      },
    ]);
    for (const key of ['theme', 'lang'])
      await aliceA1.call('SetUserSetting', { key, valueB64: toBase64(utf8(key)), updatedAtMs: now });
    // Both servers level, every row acked.
    await syncNow(srv(A2).httpUrl);
    await syncNow(srv(A1).httpUrl);
    const before = await dmSnapshot(srv(A1), 'alice');
    assert.deepEqual(await dmSnapshot(srv(A2), 'alice'), before);
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'alice'), {
      owner: 'alice',
      synced: before.copies.length,
      unsynced: 0,
    });
    const historyA1 = await fullHistory(aliceA1, 'bob');

    // alpha2 loses its database; it keeps its name and key (configured), nothing else.
    const dataDir = srv(A2).config.dataDir;
    await net.stop(A2);
    for (const name of readdirSync(dataDir)) rmSync(join(dataDir, name), { recursive: true, force: true });
    await net.dbs[A2]!.reset();
    await net.start(A2);
    await srv(A2).drain(); // its start-up cycle
    assert.deepEqual(await dmSnapshot(srv(A2), 'alice'), { copies: [], tombstones: [], settings: [] });
    // alpha2 forgot alice too: her client registers her profile again.
    await using aliceA2 = await connectUser(srv(A2).wsUrl, alice, 'alice-a2');
    const bravoReceived = await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage');
    const bobSaw = bobB.events.length;

    assert.deepEqual(await adminCall(srv(A1).httpUrl, 'POST', '/admin/mark-unsynced?owner=alice'), {
      updated: 2,
      dmUpdated: before.copies.length,
    });
    const summary = await syncNow(srv(A2).httpUrl);
    assert.deepEqual([summary.dmRows, summary.settingsRows, summary.errors], [before.copies.length, 2, 0]);
    assert.deepEqual(await dmSnapshot(srv(A2), 'alice'), before);
    assert.deepEqual((await fullHistory(aliceA2, 'bob')).map(historyView), historyA1.map(historyView));
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'alice'), {
      owner: 'alice',
      synced: before.copies.length,
      unsynced: 0,
    });

    // Nothing old went out again: bravo was not called, bob saw nothing, alpha2 has nothing to deliver.
    assert.equal(await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage'), bravoReceived);
    assert.equal(bobB.events.length, bobSaw);
    assert.deepEqual(
      [await deliveryRows(srv(A2).httpUrl, 'accepted'), await deliveryRows(srv(A2).httpUrl, 'failed')],
      [[], []],
    );
    assert.deepEqual(directMessages(aliceA2), []);

    // The rebuilt alpha2 works: alice's next message through it is the one thing bob gets.
    const fresh = pairOf(
      { from: 'alice', to: 'bob', timeMs: Date.now(), nonce: 999 },
      { kind: 'text', text: 'from the rebuilt server' },
    );
    const [answer] = await sendAll(aliceA2, [{ pair: fresh }]);
    assert.equal(answer!.deliveryState, 'delivered');
    const freshKey = `${fresh.baseKey}|1`;
    await bobB.waitFor(
      (f) => f.op === 'DirectMessage' && (f.payload as { messageKey: string }).messageKey === freshKey,
    );
    assert.deepEqual(directMessages(bobB).slice(-1), [freshKey]);
    assert.equal(bobB.events.length, bobSaw + 1);
    // alpha2 forwarded the pair to alpha1, which runs its own first attempt (docs/protocol.md §5.4): bravo is called
    // twice, stores once.
    await waitUntil(
      async () => (await srv(A1).ctx.store.delivery.getDelivery(fresh.outgoingKey))?.state === 'delivered',
      10_000,
      'alpha1 delivered its copy of the pair',
    );
    assert.equal(await answeredOk(srv(B).httpUrl, 'ReceiveIncomingMessage'), bravoReceived + 2);
    assert.equal(bobB.events.length, bobSaw + 1, 'bob got it once');
  });
});
