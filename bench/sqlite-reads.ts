/**
 * What a read costs on SQLite by how it is issued: a statement of its own outside a transaction (SQLite then
 * begins and ends a read of the WAL around it, taking and dropping the WAL's read lock), the same statements
 * inside one read transaction, and one statement for a batch of keys (`json_each`), as
 * store.delivery.getDeliveries reads a GetDmDeliveryStatus batch. On a store holding BENCH_ROWS delivered
 * pairs with their receipts (the catch-up source's rows), every row's delivery row is read by its key in
 * batches of 500 (a replication page), each way in turn, BENCH_ROUNDS times; the median µs a key is printed
 * (the raw statements, and the store's calls with their rows made into DeliveryRows), with a statement that
 * reads no page (`SELECT 1`) for the floor. One JSON line.
 *
 * Env: BENCH_ROWS (20000), BENCH_ROUNDS (5).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { machine } from './lib/machine.js';
import { median } from './lib/percentile.js';
import { seedPairs } from './lib/seed-pairs.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const BATCH = 500;

const dir = mkdtempSync(join(os.tmpdir(), 'shine-sqlite-reads-'));
try {
  const store = openSqliteStore({ path: join(dir, 'shine.sqlite'), sync: 'full' });
  await store.migrate();
  const keys = await seedPairs(store, {
    owner: 'alice',
    to: 'bob',
    serverLogin: 'source',
    count: ROWS,
    baseMs: Date.now() - ROWS - 60_000,
    proofs: true,
  });
  const batches: string[][] = [];
  for (let i = 0; i < keys.length; i += BATCH) batches.push(keys.slice(i, i + BATCH));
  const conn = store.db.conn;
  const byKey = store.db.sql('SELECT * FROM dm_delivery_state WHERE outgoing_key = ?');
  const inBatch = store.db.sql(
    'SELECT * FROM dm_delivery_state WHERE outgoing_key IN (SELECT value FROM json_each(?))',
  );
  const constant = store.db.sql('SELECT 1 AS one');

  // Each way reads every key once a round; µs a key.
  const ways: Record<string, () => Promise<number>> = {
    statementPerKeyOutsideTransaction: async () => {
      let n = 0;
      for (const key of keys) if (byKey.get(key)) n++;
      return n;
    },
    statementPerKeyInOneReadTransaction: async () => {
      let n = 0;
      for (const batch of batches) {
        conn.exec('BEGIN');
        for (const key of batch) if (byKey.get(key)) n++;
        conn.exec('COMMIT');
      }
      return n;
    },
    oneStatementPerBatch: async () => {
      let n = 0;
      for (const batch of batches) n += inBatch.all(JSON.stringify(batch)).length;
      return n;
    },
    getDeliveryPerKey: async () => {
      let n = 0;
      for (const batch of batches)
        for (const row of await Promise.all(batch.map((k) => store.delivery.getDelivery(k)))) if (row) n++;
      return n;
    },
    getDeliveriesPerBatch: async () => {
      let n = 0;
      for (const batch of batches) for (const row of await store.delivery.getDeliveries(batch)) if (row) n++;
      return n;
    },
    selectConstantPerKey: async () => {
      for (let i = 0; i < keys.length; i++) constant.get();
      return keys.length;
    },
  };
  const samples: Record<string, number[]> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of Object.entries(ways)) {
      const t0 = performance.now();
      const found = await run();
      const us = ((performance.now() - t0) * 1000) / keys.length;
      if (found !== keys.length) throw new Error(`${name} found ${found} of ${keys.length} rows`);
      (samples[name] ??= []).push(us);
    }
  }
  const usPerKey = Object.fromEntries(
    Object.entries(samples).map(([name, xs]) => [name, Number(median(xs).toFixed(2))]),
  );
  await store.close();
  console.log(
    JSON.stringify({
      bench: 'sqlite-reads',
      date: new Date().toISOString(),
      machine: machine(),
      durability: 'WAL+synchronous=FULL (the rows were written so; the timed part only reads)',
      rows: ROWS,
      batch: BATCH,
      rounds: ROUNDS,
      usPerKeyMedian: usPerKey,
      outsideToBatch: Number(
        (usPerKey.statementPerKeyOutsideTransaction! / usPerKey.getDeliveriesPerBatch!).toFixed(1),
      ),
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
