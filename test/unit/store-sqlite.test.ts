/**
 * The Store contract on SQLite (a fresh database file per test), and what only the SQLite dialect has:
 * group commit and its bounded write queue.
 */
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { messageKeyOf } from '../../src/protocol/container.js';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { DeliveryReceipt } from '../../src/protocol/receipt.js';
import { SQLITE_MIGRATIONS } from '../../src/server/store/sqlite/migrations.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
import { testPair } from '../helpers/containers.js';
import { putPair, storeContract, T0 } from '../helpers/store-contract.js';
import { queryTestDb } from '../helpers/test-db.js';

const dir = mkdtempSync(join(tmpdir(), 'shine-contract-'));
const opened: SqliteStore[] = [];
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
    assert.equal((await store.settings.getSettings('ivan')).length, 1);
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

describe('SQLite: page size and checkpoints', () => {
  const pragma = (store: SqliteStore, name: string): unknown => store.db.conn.pragma(name, { simple: true });

  it('creates a new database with 1 KiB pages, checkpointed at 4 MiB of WAL', async () => {
    const store = await fresh({ sync: 'full' });
    assert.equal(pragma(store, 'page_size'), 1024);
    assert.equal(pragma(store, 'journal_mode'), 'wal');
    assert.equal(pragma(store, 'synchronous'), 2); // FULL
    assert.equal(pragma(store, 'wal_autocheckpoint'), 4096);
    await putPair(store, { from: 'ivan', to: 'jane', timeMs: T0, nonce: 1 });
    assert.equal(pragma(store, 'page_size'), 1024);
  });

  it('keeps the page size of an existing database, and still checkpoints at 4 MiB', async () => {
    const path = join(dir, 'made-with-4k-pages.sqlite');
    const old = new Database(path);
    old.pragma('journal_mode = WAL');
    old.exec('CREATE TABLE before_shine (x INTEGER)');
    old.close();
    const store = openSqliteStore({ path, sync: 'full' });
    opened.push(store);
    await store.migrate();
    assert.equal(pragma(store, 'page_size'), 4096);
    assert.equal(pragma(store, 'wal_autocheckpoint'), 1024);
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

describe('SQLite: migration 7 (delivery rows in a rowid table)', () => {
  it('keeps every delivery row, its receipt and the due index of a database made by migration 6', async () => {
    const store = openSqliteStore({ path: join(dir, 'made-by-6.sqlite'), sync: 'full' });
    opened.push(store);
    store.db.migrate(6);
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
