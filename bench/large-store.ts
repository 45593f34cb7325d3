/**
 * Reads whose cost could grow with a user's history, on one large SQLite store, in this process (no server):
 * each runs on the event loop of a server (reads do with every writer setting), so its time is a stall for every
 * session of that process. BENCH_PAIRS pairs of one owner, alice, with BENCH_PEERS peers (remote users on
 * server `beta`), half sent by alice (their delivery rows `accepted`, not due: beta is down), half received
 * (unread), are stored through the store; alice's device `phone`, seen before all of them, acknowledges all
 * but the newest BENCH_BACKLOG. Then, medians of BENCH_READS runs (ms):
 *  - replay: every page (500 copies) of what the device has not acknowledged, as a login reads it (raising
 *    the device's replay floor after the first page, as a login does), and the same once everything is
 *    acknowledged (what each reconnect of an up-to-date device costs);
 *  - GetConversations (50 newest conversations with their unread counts);
 *  - a GetDirectMessages page (50) near the start of the first conversation (a deep scroll-back);
 *  - the wake-up of rows due to another server (`gamma`) when it connects, with beta's rows waiting;
 *  - once: alice deletes her dialog with the last peer (a DeleteConversation pair, one write);
 *  - last, once each: `shine check`'s whole-database reads (integrity check, rows that refer to nothing) on
 *    their thread, and the same statements on the store's own connection as they ran before, each with the
 *    event loop's longest stall meanwhile;
 *  - once each: the whole `shine check` (no repair), its signatures checked on the event loop and on one
 *    verify thread, with the event loop's longest stall;
 *  - last, once each: POST /admin/mark-unsynced for alice, then for everyone, every outbox row synced before
 *    each, with the event loop's longest stall meanwhile.
 * Durability: WAL + synchronous=FULL (BENCH_SYNC=normal for NORMAL); the seed runs in group commits of 500.
 *
 * Env: BENCH_PAIRS (100000), BENCH_PEERS (100), BENCH_BACKLOG (5000), BENCH_READS (5), BENCH_SYNC (full).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { toBase64 } from '../src/protocol/bytes.js';
import { messageKeyOf } from '../src/protocol/container.js';
import { ed25519PublicKey } from '../src/protocol/ed25519.js';
import type { CheckReport } from '../src/server/check/service.js';
import { checkDatabase } from '../src/server/check/service.js';
import type { BulkVerifier } from '../src/server/crypto/verify-pool.js';
import { bulkVerifier, inlineBulkVerifier } from '../src/server/crypto/verify-pool.js';
import { replayFloorAfter } from '../src/server/dm/service.js';
import { FIND_ROWS_SQL, INTEGRITY_SQL } from '../src/server/store/sqlite/check.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';
import type { StoredCopy } from '../src/server/store/types.js';
import { pairOf, seedFor } from '../test/helpers/replication.js';
import { machine } from './lib/machine.js';
import { elapsedMs, medianMs, timedWithStall } from './lib/timing.js';

const PAIRS = Number(process.env.BENCH_PAIRS ?? 100_000);
const PEERS = Number(process.env.BENCH_PEERS ?? 100);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 5000);
const READS = Number(process.env.BENCH_READS ?? 5);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const PAGE = 500;
const T0 = Date.now() - 30 * 86_400_000;

const dir = mkdtempSync(join(os.tmpdir(), 'shine-bench-large-'));
const store = openSqliteStore({ path: join(dir, 'shine.sqlite'), sync: SYNC });
try {
  await store.migrate();
  // The profiles carry the keys pairOf signs with, so `shine check` verifies every copy.
  for (const login of ['alice', ...Array.from({ length: PEERS }, (_, p) => `peer${p}`)]) {
    await store.directory.putUser(
      {
        login,
        signKeyB64: toBase64(ed25519PublicKey(seedFor(login))),
        encKeyB64: 'e',
        accessServers: ['beta'],
        version: 1,
        updatedAtMs: T0,
        signatureB64: 'x',
      },
      'imported',
      T0,
    );
  }
  await store.devices.touchDevice('alice', 'phone', T0 - 1);

  // Pair i at T0 + i minutes' worth of ms: alice → peer (i even) or peer → alice (i odd).
  const keys: string[] = [];
  const firstPeerTimes: number[] = [];
  const seedStarted = performance.now();
  for (let from = 0; from < PAIRS; from += 500) {
    const writes: Promise<unknown>[] = [];
    for (let i = from; i < Math.min(PAIRS, from + 500); i++) {
      const peer = `peer${Math.floor(i / 2) % PEERS}`;
      const sent = i % 2 === 0;
      const t = T0 + i * 20;
      const { incoming, outgoing } = pairOf(
        { from: sent ? 'alice' : peer, to: sent ? peer : 'alice', timeMs: t, nonce: i },
        { kind: 'text', bodyBytes: 96 },
      );
      keys.push(messageKeyOf(sent ? outgoing : incoming));
      if (peer === 'peer0') firstPeerTimes.push(t);
      writes.push(
        store.messages.storePair({
          incoming,
          outgoing,
          nowMs: t,
          outbox: { owners: new Map([['alice', false]]) },
          delivery: sent
            ? { state: 'accepted', attempt: 3, acceptedAtMs: t, nextAttemptAtMs: T0 + 60 * 86_400_000 }
            : { state: 'delivered', attempt: 1, acceptedAtMs: t, nextAttemptAtMs: null },
        }),
      );
    }
    await Promise.all(writes);
  }
  for (let i = 0; i < keys.length - BACKLOG; i += 1000) {
    await store.devices.ackForDevice('alice', 'phone', keys.slice(i, Math.min(i + 1000, keys.length - BACKLOG)), T0);
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;

  /** Walks the device's replay page by page, raising its floor as a login does; answers the copies replayed. */
  const replay = async (): Promise<number> => {
    let after: StoredCopy | undefined;
    let n = 0;
    for (;;) {
      const page = await store.devices.pendingForDevice(
        'alice',
        'phone',
        after ? { storedAtMs: after.storedAtMs, messageKey: after.messageKey } : null,
        PAGE,
      );
      if (!after) await store.devices.advanceReplayFloor('alice', 'phone', replayFloorAfter(page, Date.now()));
      n += page.length;
      if (page.length < PAGE) return n;
      after = page.at(-1);
    }
  };
  const replayed = await replay();
  const replayBacklogMs = await medianMs(READS, replay);
  const conversations = await store.messages.getConversations('alice', 50);
  const conversationsMs = await medianMs(READS, () => store.messages.getConversations('alice', 50));
  const before = firstPeerTimes[20]!;
  const historyQuery = { owner: 'alice', peer: 'peer0', beforeTimeMs: before, beforeMessageKey: '', limit: 50 };
  const history = await store.messages.getDirectMessages(historyQuery);
  const historyDeepPageMs = await medianMs(READS, () => store.messages.getDirectMessages(historyQuery));
  const woken = await store.delivery.wakeDeliveriesFor('gamma', T0 + 40 * 86_400_000);
  const wakeOtherServerMs = await medianMs(READS, () =>
    store.delivery.wakeDeliveriesFor('gamma', T0 + 40 * 86_400_000),
  );
  await store.devices.ackForDevice('alice', 'phone', keys.slice(keys.length - BACKLOG), T0);
  const replayUpToDateMs = await medianMs(READS, replay);
  // Last, since it deletes: alice deletes her whole dialog with the last peer (once, not a median).
  const lastPeer = `peer${PEERS - 1}`;
  const dialogs = (await store.messages.getConversations('alice', PEERS)).length;
  const end = T0 + PAIRS * 20;
  const wipe = pairOf(
    { from: 'alice', to: lastPeer, timeMs: end + 1, nonce: 1 },
    { kind: 'deleteConversation', deleteBeforeMs: end },
  );
  const deleteConversationMs = +(
    await elapsedMs(() =>
      store.messages.storePair({
        incoming: wipe.incoming,
        outgoing: wipe.outgoing,
        nowMs: end + 1,
        outbox: { owners: new Map([['alice', false]]) },
        delivery: null,
      }),
    )
  ).toFixed(2);
  const left = (await store.messages.getDirectMessages({ ...historyQuery, peer: lastPeer, beforeTimeMs: 0 })).items;
  // shine check's whole-database reads (POST /admin/check on a live server): on their thread, and the same
  // statements on the store's own connection, as they ran before.
  const checkThread = await timedWithStall(async () => {
    await store.check.integrity();
    await store.check.findRows();
  });
  const checkInline = await timedWithStall(() => {
    for (const sql of [...Object.values(INTEGRITY_SQL), ...Object.values(FIND_ROWS_SQL)])
      store.db.conn.prepare(sql).all();
  });
  // The whole check (no repair), its signatures on the event loop and on a verify thread (the server's pool).
  const wholeCheck = async (verifier: BulkVerifier) => {
    let report: CheckReport | undefined;
    const timed = await timedWithStall(async () => {
      report = await checkDatabase({ store, verifier, nowMs: () => Date.now() }, { repair: false });
    });
    return { checked: report!.containers.checked, problems: report!.problems, ...timed };
  };
  const pool = bulkVerifier(1);
  const checkWhole = { verifyInline: await wholeCheck(inlineBulkVerifier()), verifyThread: await wholeCheck(pool) };
  await pool.close();
  // POST /admin/mark-unsynced (MarkAllUserSettingsUnsynced) over a history the other server has pulled:
  // alice's rows, then everyone's.
  const markAll = async (owner: string | null) => {
    store.db.conn.exec('UPDATE dm_sync_outbox SET synced = 1');
    let marked = 0;
    const timed = await timedWithStall(async () => {
      marked = (await store.replication.markUnsynced(owner)).dmUpdated;
    });
    return { marked, ...timed };
  };
  const markUnsynced = { owner: await markAll('alice'), everyone: await markAll(null) };
  const outboxCounts = await store.replication.outboxCounts('alice');
  const outboxCountsMs = await medianMs(READS, () => store.replication.outboxCounts('alice'));

  console.log(
    JSON.stringify({
      bench: 'large-store',
      date: new Date().toISOString(),
      machine: machine(),
      durability: SYNC === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
      store: {
        pairs: PAIRS,
        peers: PEERS,
        aliceCopies: PAIRS,
        acceptedRows: Math.ceil(PAIRS / 2),
        seedSeconds: +seedSeconds.toFixed(1),
      },
      replay: { backlog: BACKLOG, replayed, pageSize: PAGE, allPagesMs: replayBacklogMs, upToDateMs: replayUpToDateMs },
      getConversations: { rows: conversations.length, ms: conversationsMs },
      getDirectMessagesDeepPage: { rows: history.items.length, ms: historyDeepPageMs },
      wakeOtherServer: { woken, ms: wakeOtherServerMs },
      deleteConversation: { dialogs, copiesLeftInDialog: left.length, ms: deleteConversationMs },
      checkReads: { thread: checkThread, inlineReplaced: checkInline },
      checkWhole,
      markUnsynced,
      debugOutbox: { ...outboxCounts, ms: outboxCountsMs },
    }),
  );
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
