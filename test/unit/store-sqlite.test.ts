/**
 * The Store contract on SQLite (a fresh database file per test), and what only the SQLite dialect has:
 * group commit and its bounded write queue.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
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
