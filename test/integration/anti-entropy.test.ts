/**
 * Anti-entropy between a user's two access servers (docs/protocol.md §7, "Anti-entropy") against real
 * in-process servers: a server restored from an older copy of its database, while its partner's outbox
 * says everything is synced, is made whole by one repair — silently, re-sending nothing; two equal
 * histories cost one round trip and no blob; and the anti-entropy ops answer every error code.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RepairSummary } from '../../src/protocol/ops.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { Ref } from '../helpers/replication.js';
import { CliHome } from '../helpers/cli.js';
import {
  ADMIN_TOKEN,
  adminCall,
  answeredOk,
  connectAsServer,
  deliveryRows,
  dmSnapshot,
  metricValue,
  outboxCounts,
  pairOf,
  replicationServer,
  seedFor,
  sendAll,
  syncNow,
} from '../helpers/replication.js';
import { assertError } from '../helpers/assert.js';
import { queryTestDb } from '../helpers/test-db.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const repair = (httpUrl: string, owner?: string) =>
  adminCall<RepairSummary>(httpUrl, 'POST', `/admin/repair${owner ? `?owner=${owner}` : ''}`);

const directMessages = (c: RawClient) => c.events.filter((e) => e.op === 'DirectMessage').length;

describe('anti-entropy: a replica restored from an old backup is repaired', () => {
  it('c) bravo2 restored while bravo1 says all synced: one repair makes bob’s history equal, silently, re-sending nothing', async () => {
    // Return cycles far off: the repair under test is the only thing that moves rows to bravo2.
    const quiet = { syncOnReturnMs: 600_000 };
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('alpha'), replicationServer('bravo1', quiet), replicationServer('bravo2', quiet)],
    });
    const [A, B1, B2] = [0, 1, 2];
    const srv = (i: number) => net.servers[i]!;
    const alice = makeUser('alice', ['alpha'], seedFor('alice'));
    const bob = makeUser('bob', ['bravo1', 'bravo2'], seedFor('bob'));
    await using aliceA = await connectUser(srv(A).wsUrl, alice, 'alice-a');
    await (await connectUser(srv(B2).wsUrl, bob, 'bob-b2')).close();
    const bobB1 = await connectUser(srv(B1).wsUrl, bob, 'bob-b1');

    const base = Date.now() - 600_000;
    const ref = (from: 'alice' | 'bob', i: number): Ref => ({
      from,
      to: from === 'alice' ? 'bob' : 'alice',
      timeMs: base + 10 * i + (from === 'bob' ? 1 : 0),
      nonce: i,
    });
    const texts = (from: 'alice' | 'bob', first: number, n: number) =>
      Array.from({ length: n }, (_, i) => ({ pair: pairOf(ref(from, first + i)) }));
    /**
     * Both of bob's servers pull from each other, so each one's outbox is all synced. Alpha's deliveries
     * (and every server's other background work) end first: a copy alpha delivers to bravo1 after bravo2
     * pulled would stay unsynced on bravo1.
     */
    const syncBoth = async () => {
      await Promise.all(net.servers.map((s) => s.drain()));
      await syncNow(srv(B2).httpUrl);
      await syncNow(srv(B1).httpUrl);
      assert.equal((await outboxCounts(srv(B1).httpUrl, 'bob')).unsynced, 0);
      assert.equal((await outboxCounts(srv(B2).httpUrl, 'bob')).unsynced, 0);
    };

    // Before the backup: a dialog both ways.
    await sendAll(aliceA, texts('alice', 0, 20));
    await sendAll(bobB1, texts('bob', 0, 10));
    await syncBoth();
    await net.stop(B2);
    const backup = await net.dbs[B2]!.backup();
    await net.start(B2);

    // After it: more messages both ways, bob's edits of two old ones, his receipt of one of alice's,
    // and alice's delete of another (a tombstone on bob's servers).
    const now = Date.now();
    await sendAll(aliceA, texts('alice', 20, 15));
    await sendAll(bobB1, texts('bob', 10, 8));
    await sendAll(
      bobB1,
      [2, 3].map((i) => ({
        pair: pairOf({ ...ref('bob', i), revisionTimeMs: now + i }, { kind: 'text', text: `e${i}` }),
      })),
    );
    await sendAll(bobB1, [
      {
        pair: pairOf(
          { from: 'bob', to: 'alice', timeMs: now, nonce: 900 },
          { kind: 'receipt', target: ref('alice', 3), readAtMs: now - 5 },
        ),
      },
    ]);
    await sendAll(aliceA, [
      {
        op: 'DeleteMessage',
        pair: pairOf(
          { from: 'alice', to: 'bob', timeMs: now, nonce: 901 },
          { kind: 'deleteMessage', target: ref('alice', 5) },
        ),
      },
    ]);
    await syncBoth();
    await bobB1.close();

    // bravo2 comes back from the backup. bravo1 is down meanwhile, so bravo2's start-up cycle cannot
    // repair it before the test does; bravo1's own start-up cycle pulls and repairs only itself.
    await net.stop(B1);
    await net.stop(B2);
    await backup.restore();
    await net.start(B2);
    await srv(B2).drain();
    await net.start(B1);
    await srv(B1).drain();
    const whole = await dmSnapshot(srv(B1), 'bob');
    const restored = await dmSnapshot(srv(B2), 'bob');
    assert.notDeepEqual(restored, whole, 'the restored copy lacks what came after the backup');
    assert.equal(whole.tombstones.length, 1);
    assert.equal((await outboxCounts(srv(B1).httpUrl, 'bob')).unsynced, 0, 'bravo1’s flags say nothing is missing');

    // A new session of bob's on bravo2 watches for events; alpha counts what it is sent.
    await using bobB2 = await connectUser(srv(B2).wsUrl, bob, 'bob-b2-new');
    const eventsBefore = directMessages(bobB2);
    const receivedBefore = await answeredOk(srv(A).httpUrl, 'ReceiveIncomingMessage');

    const summary = await repair(srv(B2).httpUrl, 'bob');
    assert.equal(summary.errors, 0);
    assert.equal(summary.owners, 1);
    assert.ok(summary.differences > 0 && summary.copiesRepaired === summary.differences, JSON.stringify(summary));
    assert.equal(summary.peerBehind, 1, 'bravo2 still held the message alice deleted after the backup');
    assert.deepEqual(await dmSnapshot(srv(B2), 'bob'), whole, 'every copy, every revision, the tombstone');

    // Silently: no event to bob's session, nothing sent to alpha, no delivery row left to attempt.
    await srv(B2).drain();
    assert.equal(directMessages(bobB2), eventsBefore);
    assert.equal(await answeredOk(srv(A).httpUrl, 'ReceiveIncomingMessage'), receivedBefore);
    assert.deepEqual(await deliveryRows(srv(B2).httpUrl, 'accepted'), []);
    // bob's repaired sent pairs took `delivered` from bravo1 (docs/protocol.md §6.8).
    const delivered = new Set((await deliveryRows(srv(B2).httpUrl, 'delivered')).map((r) => r.outgoingKey));
    for (let i = 10; i < 18; i++) {
      const r = ref('bob', i);
      assert.ok(delivered.has(`bob|alice|${r.timeMs}|${r.nonce}|2`), `bob #${i} delivered on bravo2`);
    }

    // Now equal: one round trip, nothing found (asked through `shine repair`); the counters say what the
    // first repair did.
    using home = new CliHome();
    const cli = (...args: string[]) =>
      home.run(['repair', '--server', srv(B2).httpUrl, '--owner', 'bob', ...args], {
        env: { SHINE_ADMIN_TOKEN: ADMIN_TOKEN },
      });
    const again = JSON.parse((await cli('--json')).stdout) as RepairSummary;
    assert.deepEqual([again.roundTrips, again.rangesCompared, again.differences, again.copiesRepaired], [1, 1, 0, 0]);
    const text = await cli();
    assert.equal(text.code, 0, text.stderr);
    assert.match(
      text.stdout,
      /^repair done in \d+ ms: 1 user\(s\) with 1 peer server\(s\); 1 range\(s\) compared in 1 request\(s\); 0 copy\(ies\) missing or older here, 0 repaired/,
    );
    assert.equal(await metricValue(srv(B2).httpUrl, 'repair_copies_repaired_total'), summary.copiesRepaired);
    assert.equal(await metricValue(srv(B2).httpUrl, 'repair_differences_total'), summary.differences);
  });

  it('d) two equal histories of 4 000 copies: one round trip, no blob read', { timeout: 300_000 }, async () => {
    // The answer does not depend on the size (equal roots end the comparison); bench/repair.ts measures
    // the same request on 1 000 000 copies. ANTI_ENTROPY_COPIES runs it larger.
    const COPIES = Number(process.env.ANTI_ENTROPY_COPIES ?? 4_000);
    await using net = await startNetwork({
      federate: true,
      servers: [
        replicationServer('carol1', { syncOnReturnMs: 600_000 }),
        replicationServer('carol2', { syncOnReturnMs: 600_000 }),
      ],
    });
    const carol = makeUser('carol', ['carol1', 'carol2'], seedFor('carol'));
    await (await connectUser(net.servers[0]!.wsUrl, carol, 'c1')).close();
    await (await connectUser(net.servers[1]!.wsUrl, carol, 'c2')).close();
    // The same pairs written straight into both stores (each pair is two copies of carol's outbox row).
    const base = Date.now() - 3_600_000 - COPIES;
    const outbox = { owners: new Map([['carol', true]]) };
    const WINDOW = 2048;
    for (let start = 0; start < COPIES / 2; start += WINDOW) {
      const pairs = Array.from({ length: Math.min(WINDOW, COPIES / 2 - start) }, (_, i) =>
        pairOf({ from: 'carol', to: 'dave', timeMs: base + 2 * (start + i), nonce: start + i }),
      );
      await Promise.all(
        net.servers.flatMap((s) =>
          pairs.map((p) =>
            s.ctx.store.messages.storePair({
              incoming: p.incoming,
              outgoing: p.outgoing,
              nowMs: base,
              outbox,
              delivery: null,
            }),
          ),
        ),
      );
    }
    // No blob to read: the comparison must come from the index alone.
    for (const s of net.servers)
      await queryTestDb(s.config.db, "UPDATE dm_sync_outbox SET blobs = ? WHERE owner_login = 'carol'", [
        Buffer.alloc(0),
      ]);

    const summary = await repair(net.servers[1]!.httpUrl, 'carol');
    assert.deepEqual(
      [summary.errors, summary.roundTrips, summary.rangesCompared, summary.differences, summary.copiesRepaired],
      [0, 1, 1, 0, 0],
    );
    console.log(
      JSON.stringify({
        test: 'anti-entropy digest of two equal histories',
        copies: COPIES,
        db: net.servers[1]!.config.db.kind,
        durationMs: summary.durationMs,
        bytesExchanged: summary.bytes,
        roundTrips: summary.roundTrips,
      }),
    );
  });
});

describe('anti-entropy ops: who may call them and what they answer', () => {
  it('a repair with the partner down gives up on it at the first call that gets no answer, not once per shared user', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('golf1'), replicationServer('golf2')],
    });
    const G1 = net.servers[0]!;
    for (let i = 0; i < 5; i++) {
      const user = makeUser(`gus${i}`, ['golf1', 'golf2'], seedFor(`gus${i}`));
      await (await connectUser(G1.wsUrl, user, 'g1')).close();
    }
    await net.stop(1);
    // Each further call would wait out the reconnect backoff for a dial that fails as well.
    const summary = await repair(G1.httpUrl);
    assert.deepEqual(
      { peers: summary.peers, owners: summary.owners, errors: summary.errors },
      { peers: 1, owners: 1, errors: 1 },
      JSON.stringify(summary),
    );
  });

  it('a repair of every shared user runs several owners at once: an owner whose digest waits holds up no other', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('hotel1'), replicationServer('hotel2')],
    });
    const [H1, H2] = [net.servers[0]!, net.servers[1]!];
    // Shared users are repaired in login order: hal0 first (alone), then hal1, whose digest is held, and hal2.
    const logins = ['hal0', 'hal1', 'hal2'];
    for (const login of logins) {
      const user = makeUser(login, ['hotel1', 'hotel2'], seedFor(login));
      for (const [i, s] of [H1, H2].entries()) await (await connectUser(s.wsUrl, user, `${login}-${i}`)).close();
    }
    // hal2's one copy is on hotel2 only: what the repair on hotel1 fetches.
    const p = pairOf({ from: 'hal2', to: 'carol', timeMs: Date.now() - 60_000, nonce: 1 });
    await H2.ctx.store.messages.storePair({
      incoming: p.incoming,
      outgoing: p.outgoing,
      nowMs: Date.now(),
      outbox: { owners: new Map([['hal2', true]]) },
      delivery: null,
    });
    const replication = H2.ctx.store.replication;
    const digest = replication.dmDigest.bind(replication);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let held = false;
    replication.dmDigest = async (owner, ranges) => {
      if (owner === 'hal1') {
        held = true;
        await gate;
      }
      return digest(owner, ranges);
    };
    try {
      const summary = repair(H1.httpUrl);
      await waitUntil(
        async () => (await dmSnapshot(H1, 'hal2')).copies.length > 0,
        10_000,
        "hal2's copy repaired while hal1's digest waits",
      );
      assert.ok(held, "hal1's digest was asked for and held");
      release();
      const done = await summary;
      assert.deepEqual(await dmSnapshot(H1, 'hal2'), await dmSnapshot(H2, 'hal2'), "hal2's history equal");
      assert.deepEqual(
        { owners: done.owners, errors: done.errors, copiesRepaired: done.copiesRepaired },
        // hal2's pair: both its copies.
        { owners: 3, errors: 0, copiesRepaired: 2 },
        JSON.stringify(done),
      );
    } finally {
      release();
      replication.dmDigest = digest;
    }
  });

  it('a repair of copies too large for one frame: DmFetch answers are cut at 1 000 000 bytes, the rest asked again', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [
        replicationServer('kilo1', { syncOnReturnMs: 600_000 }),
        replicationServer('kilo2', { syncOnReturnMs: 600_000 }),
      ],
    });
    const [K1, K2] = [net.servers[0]!, net.servers[1]!];
    const kim = makeUser('kim', ['kilo1', 'kilo2'], seedFor('kim'));
    for (const [i, s] of [K1, K2].entries()) await (await connectUser(s.wsUrl, kim, `k${i}`)).close();
    // 40 pairs of 60 000-byte bodies on kilo2 only: 4.8 MB of copies, 6.4 MB as base64, over one
    // frame's 4 MiB if a single DmFetch answer carried them all.
    const base = Date.now() - 60_000;
    for (let i = 0; i < 40; i++) {
      const p = pairOf({ from: 'kim', to: 'lou', timeMs: base + i, nonce: i }, { kind: 'text', bodyBytes: 60_000 });
      await K2.ctx.store.messages.storePair({
        incoming: p.incoming,
        outgoing: p.outgoing,
        nowMs: Date.now(),
        outbox: { owners: new Map([['kim', true]]) },
        delivery: null,
      });
    }
    await using asK1 = await connectAsServer(K2.wsUrl, 'kilo1', 'kilo2');
    const keys = await asK1.call<{ items: { messageKey: string }[] }>('DmKeys', {
      ownerLogin: 'kim',
      fromTimeMs: base,
      toTimeMs: base + 40,
    });
    const first = await asK1.call<{ items: { messageKey: string; blobB64: string }[]; hasMore?: boolean }>('DmFetch', {
      ownerLogin: 'kim',
      messageKeys: keys.items.map((k) => k.messageKey),
    });
    assert.equal(first.hasMore, true, 'the answer was cut');
    const raw = first.items.reduce((n, i) => n + Buffer.from(i.blobB64, 'base64').length, 0);
    assert.ok(raw <= 1_000_000 && first.items.length % 2 === 0, `whole pairs within 1 000 000 bytes: ${raw}`);
    assert.deepEqual(
      first.items.map((i) => i.messageKey),
      keys.items.slice(0, first.items.length).map((k) => k.messageKey),
      'a prefix of the asked keys, in their order',
    );

    // A repair whose second DmFetch fails still reports the copies the first one stored.
    const replication = K2.ctx.store.replication;
    const dmRows = replication.dmRows.bind(replication);
    let reads = 0;
    replication.dmRows = (o, k) => (++reads === 2 ? Promise.reject(new Error('disk gone')) : dmRows(o, k));
    let broken: RepairSummary;
    try {
      broken = await repair(K1.httpUrl, 'kim');
    } finally {
      replication.dmRows = dmRows;
    }
    // kim's own copy of each pair is in her rows of signed_messages (the other is lou's).
    const stored = (await dmSnapshot(K1, 'kim')).copies.length;
    assert.deepEqual(
      { errors: broken.errors, differences: broken.differences, copiesRepaired: broken.copiesRepaired },
      { errors: 1, differences: 80, copiesRepaired: first.items.length },
      JSON.stringify(broken),
    );
    assert.equal(2 * stored, first.items.length, 'the first answer’s pairs stored before the failure');

    const summary = await repair(K1.httpUrl, 'kim');
    assert.deepEqual(
      { errors: summary.errors, differences: summary.differences, copiesRepaired: summary.copiesRepaired },
      { errors: 0, differences: 80 - 2 * stored, copiesRepaired: 80 - 2 * stored },
      JSON.stringify(summary),
    );
    assert.deepEqual(await dmSnapshot(K1, 'kim'), await dmSnapshot(K2, 'kim'), "kim's history equal");
  });

  it('DmDigest, DmKeys, DmFetch answer the owner’s copies to its other server, and each error code', async () => {
    await using net = await startNetwork({
      federate: true,
      servers: [replicationServer('echo1'), replicationServer('echo2'), replicationServer('other')],
    });
    const E1 = net.servers[0]!;
    const erin = makeUser('erin', ['echo1', 'echo2'], seedFor('erin'));
    const fred = makeUser('fred', ['echo1'], seedFor('fred'));
    await using erinE1 = await connectUser(E1.wsUrl, erin, 'e1');
    await (await connectUser(E1.wsUrl, fred, 'f1')).close();
    const base = Date.now() - 60_000;
    const refs = Array.from({ length: 6 }, (_, i) => ({ from: 'erin', to: 'fred', timeMs: base + i, nonce: i }));
    await sendAll(
      erinE1,
      refs.map((r) => ({ pair: pairOf(r) })),
    );
    // fred (only on echo1) writes to erin: her single incoming copies.
    await using fredE1 = await connectUser(E1.wsUrl, fred, 'f1');
    await sendAll(fredE1, [{ pair: pairOf({ from: 'fred', to: 'erin', timeMs: base + 10, nonce: 1 }) }]);

    await using asE2 = await connectAsServer(E1.wsUrl, 'echo2', 'echo1');
    const range = { ownerLogin: 'erin', fromTimeMs: base, toTimeMs: base + 20 };
    const digest = await asE2.call<{ items: { fromTimeMs: number; toTimeMs: number; count: number }[] }>('DmDigest', {
      ...range,
      buckets: 2,
    });
    assert.deepEqual(
      digest.items.map((b) => [b.fromTimeMs - base, b.toTimeMs - base, b.count]),
      [
        [0, 10, 12],
        [10, 20, 1],
      ],
    );
    const keys = await asE2.call<{ items: { messageKey: string }[]; hasMore: boolean }>('DmKeys', range);
    assert.equal(keys.items.length, 13);
    assert.equal(keys.hasMore, false);
    const fetched = await asE2.call<{ items: { messageKey: string; blobB64: string }[] }>('DmFetch', {
      ownerLogin: 'erin',
      messageKeys: [...keys.items.map((k) => k.messageKey), 'erin|fred|1|1|2'],
    });
    assert.deepEqual(
      fetched.items.map((i) => i.messageKey),
      keys.items.map((k) => k.messageKey),
      'every listed copy, nothing for an unknown key',
    );
    const first = pairOf(refs[0]!);
    assert.equal(fetched.items.find((i) => i.messageKey === first.outgoingKey)!.blobB64, first.outgoingBlobB64);
    // fred's own outgoing copy is in fred's outbox, not erin's: not handed out for her.
    const fredsOwn = pairOf({ from: 'fred', to: 'erin', timeMs: base + 10, nonce: 1 }).outgoingKey;
    assert.deepEqual(
      (await asE2.call<{ items: unknown[] }>('DmFetch', { ownerLogin: 'erin', messageKeys: [fredsOwn] })).items,
      [],
    );

    // Errors: each refused, nothing changed.
    const before = await dmSnapshot(E1, 'erin');
    assertError(await asE2.request('DmDigest', { ...range, ownerLogin: '', buckets: 1 }), 400, 'EMPTY_OWNER_LOGIN');
    assertError(await asE2.request('DmDigest', { ...range, buckets: 0 }), 400, 'BAD_FIELDS');
    assertError(await asE2.request('DmDigest', { ...range, buckets: 4097 }), 400, 'BAD_FIELDS');
    assertError(await asE2.request('DmKeys', { ...range, toTimeMs: base }), 400, 'BAD_FIELDS');
    assertError(
      await asE2.request('DmFetch', { ownerLogin: 'erin', messageKeys: Array(201).fill('k') }),
      400,
      'BAD_FIELDS',
    );
    assertError(await asE2.request('DmKeys', { ...range, ownerLogin: 'fred' }), 403, 'NOT_PEER');
    assertError(
      await asE2.request('DmKeys', { ...range, ownerLogin: 'nobody' }),
      403,
      'LOCAL_SERVER_NOT_ACCESS_SERVER',
    );
    assertError(await asE2.request('DmKeys', { ...range, sourceServerLogin: 'other' }), 403, 'SOURCE_MISMATCH');
    await using asOther = await connectAsServer(E1.wsUrl, 'other', 'echo1');
    assertError(
      await asOther.request('DmFetch', { ownerLogin: 'erin', messageKeys: [first.outgoingKey] }),
      403,
      'NOT_PEER',
    );
    assertError(await erinE1.request('DmDigest', { ...range, buckets: 1 }), 401, 'NOT_AUTHENTICATED');
    assert.deepEqual(await dmSnapshot(E1, 'erin'), before);
  });
});
