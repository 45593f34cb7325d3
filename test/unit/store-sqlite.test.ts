/**
 * The Store contract on SQLite (a fresh database file per test), and what only the SQLite dialect has:
 * group commit and its bounded write queue.
 */
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { messageKeyOf } from '../../src/protocol/container.js';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { DeliveryReceipt } from '../../src/protocol/receipt.js';
import type { SqliteDb } from '../../src/server/store/sqlite/db.js';
import { SQLITE_MIGRATIONS } from '../../src/server/store/sqlite/migrations.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
import type { SqliteStoreOptions } from '../../src/server/store/sqlite/store.js';
import type { AutoTuning, ThreadedSqliteStore } from '../../src/server/store/sqlite/threaded.js';
import { openThreadedSqliteStore } from '../../src/server/store/sqlite/threaded.js';
import { testPair } from '../helpers/containers.js';
import { allSettings, putPair, storeContract, T0 } from '../helpers/store-contract.js';
import { queryTestDb } from '../helpers/test-db.js';

const dir = mkdtempSync(join(tmpdir(), 'shine-contract-'));
const opened: { close(): Promise<void> }[] = [];
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

async function fresh(opts: { sync?: 'full' | 'normal'; maxQueuedWrites?: number } = {}): Promise<SqliteStore> {
  const store = openSqliteStore({
    path: join(dir, `db${opened.length}.sqlite`),
    sync: opts.sync ?? 'normal',
    ...(opts.maxQueuedWrites === undefined ? {} : { maxQueuedWrites: opts.maxQueuedWrites }),
  });
  opened.push(store);
  await store.migrate();
  return store;
}

storeContract({
  dialect: 'sqlite',
  open: () => fresh(),
  query: (store, sql, params) => queryTestDb(`sqlite:${(store as SqliteStore).db.conn.name}`, sql, params),
});

/** A fresh store whose writes run on a thread of their own (SHINE_SQLITE_WRITER=thread), or by load (auto). */
async function freshThreaded(
  opts: {
    path?: string;
    maxQueuedWrites?: number;
    writer?: 'thread' | 'auto';
    tuning?: AutoTuning;
    checkpointTuning?: SqliteStoreOptions['checkpointTuning'];
  } = {},
): Promise<ThreadedSqliteStore> {
  const store = (await openThreadedSqliteStore(
    {
      path: opts.path ?? join(dir, `db${opened.length}.sqlite`),
      sync: 'full',
      ...(opts.maxQueuedWrites === undefined ? {} : { maxQueuedWrites: opts.maxQueuedWrites }),
      ...(opts.checkpointTuning ? { checkpointTuning: opts.checkpointTuning } : {}),
    },
    opts.writer,
    opts.tuning,
  )) as ThreadedSqliteStore;
  opened.push(store);
  await store.migrate();
  return store;
}

storeContract({
  dialect: 'sqlite',
  name: 'sqlite, writer thread',
  open: () => freshThreaded(),
  query: (store, sql, params) => queryTestDb(`sqlite:${(store as ThreadedSqliteStore).path}`, sql, params),
});

storeContract({
  dialect: 'sqlite',
  name: 'sqlite, writer by load (auto)',
  open: () => freshThreaded({ writer: 'auto' }),
  query: (store, sql, params) => queryTestDb(`sqlite:${(store as ThreadedSqliteStore).path}`, sql, params),
});

describe('SQLite: the writer thread', () => {
  it('writes of one turn share a commit on the thread; a read after their answer sees them', async () => {
    const store = await freshThreaded();
    const before = store.commitStats();
    await Promise.all([
      ...Array.from({ length: 50 }, (_, i) => putPair(store, { from: 'kim', to: 'lee', timeMs: T0 + i, nonce: i })),
      store.meta.setMeta('with', 'them'),
    ]);
    const after = store.commitStats();
    assert.equal(after.writes - before.writes, 51);
    assert.ok(after.commits - before.commits <= 2, `51 writes took ${after.commits - before.commits} commits`);
    const page = await store.messages.getDirectMessages({
      owner: 'lee',
      peer: 'kim',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 100,
    });
    assert.equal(page.items.length, 50);
    assert.equal(await store.meta.getMeta('with'), 'them');
  });

  it("a write's ShineError crosses with its code: a full queue answers 503 OVERLOADED and commits the rest", async () => {
    const store = await freshThreaded({ maxQueuedWrites: 3 });
    const writes = Array.from({ length: 5 }, (_, i) =>
      store.meta.setMeta(`k${i}`, 'v').then(
        () => 'ok',
        (err: { code?: string; status?: number }) => `${err.status} ${err.code}`,
      ),
    );
    assert.deepEqual(await Promise.all(writes), ['ok', 'ok', 'ok', '503 OVERLOADED', '503 OVERLOADED']);
    assert.equal(await store.meta.getMeta('k2'), 'v');
    assert.equal(await store.meta.getMeta('k3'), null);
  });

  it('close commits the writes still queued; another store opened on the file reads them', async () => {
    const path = join(dir, 'threaded-close.sqlite');
    const first = await freshThreaded({ path });
    const queued = Array.from({ length: 20 }, (_, i) => first.meta.setMeta(`q${i}`, String(i)));
    await first.close();
    assert.equal((await Promise.all(queued)).length, 20);
    const second = await freshThreaded({ path });
    assert.equal(await second.meta.getMeta('q19'), '19');
  });

  it('once the thread is gone, writes and ping fail with 500 INTERNAL and reads go on', async () => {
    const store = await freshThreaded();
    await store.meta.setMeta('kept', 'yes');
    await store.kill();
    await assert.rejects(store.meta.setMeta('lost', 'no'), { code: 'INTERNAL', status: 500 });
    await assert.rejects(store.ping(), { code: 'INTERNAL' });
    assert.equal(await store.meta.getMeta('kept'), 'yes');
  });
});

describe('SQLite: the writer by load (auto)', () => {
  /** An auto store that moves writes to the thread as soon as two commits in a row held 8 writes or more. */
  const eager = (extra: Parameters<typeof freshThreaded>[0] = {}) =>
    freshThreaded({ writer: 'auto', tuning: { idleCores: 0, idleWindowMs: 0 }, ...extra });
  /** Pairs stored `perTurn` to a turn of the event loop, as a loaded server receives them; waits for all. */
  async function burst(store: ThreadedSqliteStore, from: number, turns: number, perTurn: number): Promise<void> {
    const writes: Promise<unknown>[] = [];
    for (let t = 0; t < turns; t++) {
      for (let k = 0; k < perTurn; k++) {
        const i = from + t * perTurn + k;
        writes.push(putPair(store, { from: 'ola', to: `peer${i % 5}`, timeMs: T0 + i, nonce: i }));
      }
      await new Promise(setImmediate);
    }
    await Promise.all(writes);
  }
  /**
   * Bursts of 20 turns of 20 pairs each until writes ran on the thread (the first heavy load starts it, and the
   * writes move once it is ready); answers the pairs stored.
   */
  async function loadUntilThread(store: ThreadedSqliteStore): Promise<number> {
    let stored = 0;
    while (store.sides().thread.writes === 0) {
      assert.ok(stored < 40 * 400, `no write on the thread after ${stored} pairs`);
      await burst(store, stored, 20, 20);
      stored += 400;
    }
    return stored;
  }
  const count = (store: ThreadedSqliteStore) =>
    queryTestDb(`sqlite:${store.path}`, 'SELECT COUNT(*) AS n FROM signed_messages', []).then((rows) =>
      Number((rows[0] as { n: number }).n),
    );

  it('a light load commits on the event loop and never starts the thread', async () => {
    const store = await freshThreaded({ writer: 'auto', tuning: { idleCores: 0, idleWindowMs: 0 } });
    for (let i = 0; i < 30; i++) await putPair(store, { from: 'pia', to: 'quinn', timeMs: T0 + i, nonce: i });
    await burst(store, 100, 10, 3); // three writes a turn: under the threshold
    const { eventLoop, thread } = store.sides();
    assert.equal(thread.writes, 0);
    assert.equal(store.threadStarted, false);
    assert.ok(eventLoop.writes >= 60, JSON.stringify(store.sides()));
  });

  it('a heavy load starts the thread and moves the writes there, and they come back once it is light again', async () => {
    const store = await eager();
    assert.equal(store.threadStarted, false);
    const stored = await loadUntilThread(store);
    await burst(store, stored, 10, 20); // all on the thread now
    const loaded = store.sides();
    assert.ok(loaded.thread.writes > 0, JSON.stringify(loaded));
    assert.ok(loaded.thread.writes / loaded.thread.commits >= 4, JSON.stringify(loaded));
    // The thread's last commits were large, so the next write may still go there; it commits alone, and
    // the writes after it commit on the event loop.
    await putPair(store, { from: 'ola', to: 'rex', timeMs: T0 + 5000, nonce: 0 });
    const light = store.sides();
    for (let i = 1; i < 10; i++) await putPair(store, { from: 'ola', to: 'rex', timeMs: T0 + 5000 + i, nonce: i });
    const after = store.sides();
    assert.equal(after.thread.writes, light.thread.writes, JSON.stringify({ light, after }));
    assert.equal(after.eventLoop.writes - light.eventLoop.writes, 9);
    assert.equal(await count(store), 2 * (stored + 210));
  });

  it("keeps the machine's idle cores in mind: with none to spare, a heavy load stays on the event loop", async () => {
    const store = await freshThreaded({ writer: 'auto', tuning: { idleCores: 3, idleWindowMs: 0 } }); // more than 2
    await burst(store, 0, 20, 20);
    assert.equal(store.sides().thread.writes, 0);
    assert.equal(store.threadStarted, false);
  });

  it("answers every write while either side's final passes hold its commits, and the WAL starts over", async () => {
    const store = await eager({ checkpointTuning: { intervalMs: 5, restartBytes: 1 } });
    const stored = await loadUntilThread(store);
    await burst(store, stored, 40, 20);
    await burst(store, stored + 800, 20, 2);
    assert.equal(await count(store), 2 * (stored + 840));
    // The event loop's commits ran its own checkpoints …
    const ck = (store as unknown as { reader: SqliteDb }).reader.checkpointer!;
    await ck.idle();
    assert.ok(ck.stats.restarts > 0 && ck.stats.complete > 0, JSON.stringify(ck.stats));
    // … and the thread's commits the thread's, whose final passes held its own queue and finished.
    const onThread = await store.threadCheckpoints();
    assert.ok(onThread && onThread.restarts > 0 && onThread.complete > 0, JSON.stringify(onThread));
    // More than 28 MB of frames were committed, most on the thread: the WAL started over all along.
    const wal = statSync(`${store.path}-wal`).size;
    assert.ok(wal < 8 * 1024 * 1024, `WAL of ${wal} bytes`);
  });

  it('once the thread is gone, writes go on at the event loop and ping answers', async () => {
    const store = await eager();
    const stored = await loadUntilThread(store);
    await store.kill();
    await burst(store, stored, 10, 20);
    await store.ping();
    assert.equal(await count(store), 2 * (stored + 200));
  });

  it('close commits what is queued on both sides; another store opened on the file reads it', async () => {
    const path = join(dir, 'auto-close.sqlite');
    const first = await eager({ path });
    const stored = await loadUntilThread(first);
    const queued = Array.from({ length: 40 }, (_, i) => first.meta.setMeta(`q${i}`, String(i)));
    const closing = first.close();
    // Issued while the thread closes: answered (committed or refused), never left waiting.
    const late = first.meta.setMeta('late', 'x').then(
      () => 'ok',
      (err: { code?: string }) => err.code,
    );
    await closing;
    assert.equal((await Promise.all(queued)).length, 40);
    assert.ok(['ok', 'INTERNAL'].includes(String(await late)));
    const second = await freshThreaded({ path, writer: 'auto' });
    assert.equal(await second.meta.getMeta('q39'), '39');
    assert.equal(await count(second), 2 * stored);
  });
});

describe('SQLite: group commit', () => {
  it('concurrent writes share commits and all resolve after them', async () => {
    const store = await fresh({ sync: 'full' });
    const before = { ...store.db.stats };
    await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        putPair(store, { from: 'gina', to: 'hank', timeMs: T0 + 5000 + i, nonce: i }),
      ),
    );
    const commits = store.db.stats.commits - before.commits;
    assert.ok(commits < 20, `200 writes took ${commits} commits`);
    const page = await store.messages.getDirectMessages({
      owner: 'hank',
      peer: 'gina',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 200,
    });
    assert.equal(page.items.length, 200);
  });

  it('areas share one connection: writes of several areas queued together commit once', async () => {
    const store = await fresh({ sync: 'full' });
    const before = { ...store.db.stats };
    await Promise.all([
      store.meta.setMeta('split', 'one'),
      store.settings.setSetting({
        owner: 'ivan',
        key: 'lang',
        value: new Uint8Array([1]),
        updatedAtMs: T0,
        nowMs: T0,
        synced: false,
      }),
      store.devices.touchDevice('ivan', 'laptop', T0),
      store.nonces.rememberS2sNonce('srv.example', 'bm9uY2U=', T0, T0 - 1),
    ]);
    assert.deepEqual(
      { commits: store.db.stats.commits - before.commits, jobs: store.db.stats.jobs - before.jobs },
      { commits: 1, jobs: 4 },
    );
    assert.equal(await store.meta.getMeta('split'), 'one');
    assert.equal((await allSettings(store, 'ivan')).length, 1);
    assert.equal(await store.nonces.rememberS2sNonce('srv.example', 'bm9uY2U=', T0 + 1, T0 - 1), false);
  });

  it('refuses writes with 503 OVERLOADED while the commit queue is full, and commits the queued ones', async () => {
    const small = await fresh({ maxQueuedWrites: 3 });
    const writes = Array.from({ length: 5 }, (_, i) =>
      small.meta.setMeta(`k${i}`, 'v').then(
        () => 'ok',
        (err: { code?: string }) => err.code,
      ),
    );
    assert.deepEqual(await Promise.all(writes), ['ok', 'ok', 'ok', 'OVERLOADED', 'OVERLOADED']);
    assert.equal(await small.meta.getMeta('k2'), 'v');
    assert.equal(await small.meta.getMeta('k3'), null);
  });
});

describe("SQLite: shine check's whole-database reads", () => {
  it('run on a connection of their own (a thread), which sees what is committed and nothing else', async () => {
    const store = await fresh();
    await putPair(store, { from: 'ivan', to: 'jane', timeMs: T0, nonce: 1 });
    const ghost = 'ivan|jane|99|9|2';
    // An orphan delivery row written on the store's connection and not committed yet: a read on that
    // connection would see it, one on another connection does not.
    const conn = store.db.conn;
    conn.exec('BEGIN');
    conn
      .prepare(
        `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
           reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version,
           last_error, updated_at_ms) VALUES (?, 'ivan|jane|99|9', 'ivan', 'jane', 0, 0, 'failed', 1, 1, NULL, NULL, 1, NULL, 1)`,
      )
      .run(ghost);
    const during = await store.check.findRows();
    assert.deepEqual((await store.check.integrity()).problems, []);
    conn.exec('COMMIT');
    assert.deepEqual(during.deliveryWithoutCopy, []);
    assert.deepEqual((await store.check.findRows()).deliveryWithoutCopy, [ghost]);
  });
});

describe('SQLite: MarkAllUserSettingsUnsynced over a long outbox', () => {
  it('marks every synced row of the owner (then of everyone) in pages, rows of equal time across their edges', async () => {
    const store = await fresh();
    // 2 500 rows of alice (seven a millisecond, so pages end inside a millisecond; every tenth unsynced) and
    // 1 500 synced rows of bob: several pages of markUnsynced each.
    const rows = (owner: string, n: number, unsynced: string) =>
      store.db.conn.exec(`
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ${n})
        INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms)
        SELECT '${owner}', printf('k%05d', i), printf('k%05d:0:0', i), i, x'00', NOT (${unsynced}), i / 7 FROM n`);
    rows('alice', 2500, 'i % 10 = 0');
    rows('bob', 1500, '0');
    assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 2250, unsynced: 250 });
    assert.deepEqual(await store.replication.markUnsynced('alice'), { updated: 0, dmUpdated: 2250 });
    assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 0, unsynced: 2500 });
    assert.deepEqual(await store.replication.outboxCounts('bob'), { synced: 1500, unsynced: 0 });
    assert.deepEqual(await store.replication.markUnsynced(null), { updated: 0, dmUpdated: 1500 });
    assert.deepEqual(await store.replication.outboxCounts('bob'), { synced: 0, unsynced: 1500 });
  });
});

describe('SQLite: page size and checkpoints', () => {
  const pragma = (store: SqliteStore, name: string): unknown => store.db.conn.pragma(name, { simple: true });

  it('creates a new database with 1 KiB pages, WAL and FULL sync, checkpointed on a thread', async () => {
    const store = await fresh({ sync: 'full' });
    assert.equal(pragma(store, 'page_size'), 1024);
    assert.equal(pragma(store, 'journal_mode'), 'wal');
    assert.equal(pragma(store, 'synchronous'), 2); // FULL
    assert.equal(pragma(store, 'wal_autocheckpoint'), 0); // the writer never checkpoints in its COMMIT
    assert.equal(pragma(store, 'journal_size_limit'), 32 * 1024 * 1024); // the WAL file cut back when it starts over
    assert.ok(store.db.checkpointer);
    // Opening and migrating start no thread (a CLI command that only reads starts none); a commit does.
    assert.equal(store.db.checkpointer.threadStarted, false);
    await putPair(store, { from: 'ivan', to: 'jane', timeMs: T0, nonce: 1 });
    assert.equal(store.db.checkpointer.threadStarted, true);
    assert.equal(pragma(store, 'page_size'), 1024);
  });

  it('keeps the page size of an existing database; checkpoints in COMMIT at 4 MiB when asked to', async () => {
    const path = join(dir, 'made-with-4k-pages.sqlite');
    const old = new Database(path);
    old.pragma('journal_mode = WAL');
    old.exec('CREATE TABLE before_shine (x INTEGER)');
    old.close();
    const store = openSqliteStore({ path, sync: 'full', checkpoints: 'commit' });
    opened.push(store);
    await store.migrate();
    assert.equal(pragma(store, 'page_size'), 4096);
    assert.equal(pragma(store, 'wal_autocheckpoint'), 1024);
    assert.equal(store.db.checkpointer, null);
    await putPair(store, { from: 'ivan', to: 'jane', timeMs: T0, nonce: 2 });
    const page = await store.messages.getDirectMessages({
      owner: 'jane',
      peer: 'ivan',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 10,
    });
    assert.equal(page.items.length, 1);
  });
});

describe('SQLite: checkpoints on a thread', () => {
  let n = 0;
  /** A store whose thread checkpoints every 5 ms and starts the WAL over from `restartBytes` (128 KiB) on. */
  async function small(restartBytes = 128 * 1024): Promise<{ store: SqliteStore; path: string }> {
    const path = join(dir, `ckpt${n++}.sqlite`);
    const store = openSqliteStore({ path, sync: 'full', checkpointTuning: { intervalMs: 5, restartBytes } });
    opened.push(store);
    await store.migrate();
    return { store, path };
  }
  /** `pairs` pairs from 10 senders, stored 10 at a time (as concurrent clients send them). */
  async function write(store: SqliteStore, from: number, pairs: number): Promise<void> {
    for (let i = from; i < from + pairs; i += 10)
      await Promise.all(
        Array.from({ length: 10 }, (_, k) =>
          putPair(store, {
            from: `sender${(i + k) % 10}`,
            to: `rcpt${(i + k) % 10}`,
            timeMs: T0 + i + k,
            nonce: i + k,
          }),
        ),
      );
  }
  const walBytes = (path: string): number => statSync(`${path}-wal`).size;
  const historyCount = (db: Database.Database): number =>
    (db.prepare('SELECT COUNT(*) AS n FROM signed_messages').get() as { n: number }).n;

  it('copies every commit into the database file and starts the WAL over, while writes go on', async () => {
    const { store, path } = await small();
    await write(store, 0, 600); // about 20 MB of WAL frames at 1 KiB pages
    await store.db.checkpointer!.idle();
    const stats = store.db.checkpointer!.stats;
    assert.ok(stats.checkpoints > 0 && stats.restarts > 0, JSON.stringify(stats));
    assert.ok(stats.complete > 0, JSON.stringify(stats));
    // Started over: the WAL file never grew to hold everything written.
    assert.ok(walBytes(path) < 8 * 1024 * 1024, `WAL of ${walBytes(path)} bytes`);
    // Every committed pair is in the database file itself: a copy of the file without its WAL holds them.
    const copy = join(dir, `ckpt-copy${n}.sqlite`);
    copyFileSync(path, copy);
    const alone = new Database(copy, { readonly: true });
    try {
      assert.equal(historyCount(alone), 1200);
    } finally {
      alone.close();
    }
  });

  it('answers every write held while the thread copies the last frames', async () => {
    const { store } = await small(1); // every turn ends with a final pass that holds the writer
    // Writes queued in every turn of the event loop, so some land while a final pass holds commits.
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < 300; i++) {
      writes.push(putPair(store, { from: 'tomas', to: `user${i % 7}`, timeMs: T0 + i, nonce: i }));
      if (i % 10 === 9) await new Promise(setImmediate);
    }
    await Promise.all(writes);
    await store.db.checkpointer!.idle();
    assert.ok(store.db.checkpointer!.stats.restarts > 0, JSON.stringify(store.db.checkpointer!.stats));
    assert.equal(historyCount(store.db.conn), 600);
  });

  it('goes back to checkpoints in COMMIT when the thread dies, and writes go on', async () => {
    const { store, path } = await small();
    await write(store, 0, 100);
    await store.db.checkpointer!.kill();
    assert.equal(pragma(store, 'wal_autocheckpoint'), 4096);
    await write(store, 100, 300);
    assert.equal(historyCount(store.db.conn), 800);
    // SQLite's own checkpoints keep the WAL near its 4 MiB.
    assert.ok(walBytes(path) < 8 * 1024 * 1024, `WAL of ${walBytes(path)} bytes`);
  });

  it('closes with a checkpoint under way, and every write is on disk', async () => {
    const { store, path } = await small();
    const writes = write(store, 0, 200);
    await writes;
    await store.close();
    const reopened = new Database(path, { readonly: true });
    try {
      assert.equal(historyCount(reopened), 400);
    } finally {
      reopened.close();
    }
  });

  const pragma = (store: SqliteStore, name: string): unknown => store.db.conn.pragma(name, { simple: true });
});

/** A store whose database has only the first `migrations` migrations applied, as an older build left it. */
function madeBy(migrations: number): SqliteStore {
  const store = openSqliteStore({ path: join(dir, `made-by-${migrations}.sqlite`), sync: 'full' });
  opened.push(store);
  store.db.migrate(migrations);
  return store;
}

describe('SQLite: migration 7 (delivery rows in a rowid table)', () => {
  it('keeps every delivery row, its receipt and the due index of a database made by migration 6', async () => {
    const store = madeBy(6);
    const shape = () =>
      (store.db.conn.prepare("SELECT sql FROM sqlite_schema WHERE name = 'dm_delivery_state'").get() as { sql: string })
        .sql;
    assert.match(shape(), /WITHOUT ROWID/);
    // Written by this build's store into the tables of migration 6: delivered with a receipt, and accepted.
    const keys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const spec = { from: 'kim', to: 'lee', timeMs: T0 + i, nonce: i };
      const proof: DeliveryReceipt = {
        serverLogin: 'beta',
        messageKey: messageKeyOf(testPair(spec).incoming),
        revisionTimeMs: 0,
        reencryptedAtMs: 0,
        storedAtMs: T0 + i,
        containerSha256B64: toBase64(new Uint8Array(32).fill(i)),
        signatureB64: toBase64(new Uint8Array(64).fill(7)),
      };
      const delivery = { state: 'delivered' as const, attempt: 1, acceptedAtMs: T0 + i, nextAttemptAtMs: null, proof };
      keys.push((await putPair(store, spec, { delivery })).outgoing.messageKey);
    }
    const late = await putPair(
      store,
      { from: 'kim', to: 'lee', timeMs: T0 + 9, nonce: 9 },
      { delivery: { state: 'accepted', attempt: 1, acceptedAtMs: T0 + 9, nextAttemptAtMs: T0 + 10 } },
    );
    keys.push(late.outgoing.messageKey);
    const before = await Promise.all(keys.map((k) => store.delivery.getDelivery(k)));
    assert.equal(before.filter((d) => d?.proof).length, 3);
    const dueBefore = await store.delivery.dueDeliveries(T0 + 20, 10);
    assert.equal(dueBefore.length, 1);

    await store.migrate();
    assert.equal(store.db.conn.pragma('user_version', { simple: true }), SQLITE_MIGRATIONS.length);
    assert.doesNotMatch(shape(), /WITHOUT ROWID/);
    assert.deepEqual(await Promise.all(keys.map((k) => store.delivery.getDelivery(k))), before);
    assert.deepEqual(await store.delivery.dueDeliveries(T0 + 20, 10), dueBefore);
    const history = await store.messages.getDirectMessages({
      owner: 'kim',
      peer: 'lee',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 10,
    });
    assert.deepEqual(
      history.items.map((h) => h.deliveryState),
      ['accepted', 'delivered', 'delivered', 'delivered'],
    );
    // The upsert on the primary key still finds the row: a new revision of a pair updates it.
    await putPair(store, { from: 'kim', to: 'lee', timeMs: T0 + 9, nonce: 9, revisionTimeMs: 5 });
    assert.equal((await store.delivery.getDelivery(late.outgoing.messageKey))?.state, 'delivered');
  });
});

describe('SQLite: migration 8 (the outbox without its primary key index)', () => {
  it('keeps every outbox row of a database made by migration 7; a key still finds, revises and acks its row', async () => {
    const store = madeBy(7);
    const indexes = () =>
      (
        store.db.conn
          .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'dm_sync_outbox' ORDER BY name")
          .all() as { name: string }[]
      ).map((r) => r.name);
    assert.deepEqual(indexes(), [
      'dm_sync_outbox_digest',
      'dm_sync_outbox_unsynced',
      'sqlite_autoindex_dm_sync_outbox_1',
    ]);
    // Written by this build's store into the tables of migration 7: kim's rows unsynced, lee's synced.
    const outbox = {
      owners: new Map([
        ['kim', false],
        ['lee', true],
      ]),
    };
    const keys: string[] = [];
    for (let i = 0; i < 4; i++) {
      keys.push(
        (await putPair(store, { from: 'kim', to: 'lee', timeMs: T0 + i, nonce: i }, { outbox })).outgoing.messageKey,
      );
    }
    const all = [{ fromTimeMs: 0, toTimeMs: T0 * 2 }];
    const page = (owner: string, ackSyncIds: string[] = []) =>
      store.replication.dmSyncPage({
        owner,
        ackSyncIds,
        afterStoredAtMs: -1,
        afterKey: '',
        limit: 100,
        maxBytes: 1 << 30,
      });
    const read = async () => ({
      pages: [await page('kim'), await page('lee')],
      counts: [await store.replication.outboxCounts('kim'), await store.replication.outboxCounts('lee')],
      digests: [await store.replication.dmDigest('kim', all), await store.replication.dmDigest('lee', all)],
      keys: await store.replication.dmKeys('kim', all[0]!, 10),
      rows: await store.replication.dmRows('kim', keys),
    });
    const before = await read();
    assert.equal(before.pages[0]!.items.length, 4);
    assert.equal(before.rows.length, 4);

    await store.migrate();
    assert.equal(store.db.conn.pragma('user_version', { simple: true }), SQLITE_MIGRATIONS.length);
    assert.deepEqual(indexes(), ['dm_sync_outbox_digest', 'dm_sync_outbox_unsynced']);
    assert.deepEqual(await read(), before);
    // A new revision of a pair replaces its row (no second one), and an ack of its current syncId marks it synced.
    await putPair(store, { from: 'kim', to: 'lee', timeMs: T0, nonce: 0, revisionTimeMs: 5 }, { outbox });
    assert.deepEqual(await store.replication.outboxCounts('kim'), { synced: 0, unsynced: 4 });
    const revised = (await store.replication.dmRows('kim', [keys[0]!]))[0]!;
    assert.equal(revised.syncId, `${keys[0]}:5:0`);
    await page('kim', [...before.pages[0]!.items.slice(1).map((i) => i.syncId), `${keys[0]}:0:0`]);
    assert.deepEqual(await store.replication.outboxCounts('kim'), { synced: 3, unsynced: 1 });
    await page('kim', [revised.syncId]);
    assert.deepEqual(await store.replication.outboxCounts('kim'), { synced: 4, unsynced: 0 });
  });
});

describe('SQLite: migration 9 (delivery rows counted by state)', () => {
  it('counts the rows of a database made by migration 8, then keeps the count as rows change', async () => {
    const store = madeBy(8);
    const at = (i: number) => ({ from: 'kim', to: 'lee', timeMs: T0 + i, nonce: i }) as const;
    const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
    for (const i of [1, 2, 3]) await putPair(store, at(i));
    for (const i of [4, 5]) await putPair(store, at(i), { delivery: accepted });
    await putPair(store, at(6), { delivery: { ...accepted, state: 'failed', nextAttemptAtMs: null } });

    await store.migrate();
    assert.equal(store.db.conn.pragma('user_version', { simple: true }), SQLITE_MIGRATIONS.length);
    assert.deepEqual(await store.delivery.countDeliveriesByState(), { accepted: 2, delivered: 3, failed: 1 });
    const key = messageKeyOf(testPair(at(4)).outgoing);
    assert.equal(await store.delivery.markDelivered(key, { revisionTimeMs: 0, reencryptedAtMs: 0 }, T0, null), true);
    await putPair(store, at(7));
    assert.deepEqual(await store.delivery.countDeliveriesByState(), { accepted: 1, delivered: 5, failed: 1 });
  });
});
