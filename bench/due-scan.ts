/**
 * The delivery worker's due-row scan (store.dueDeliveries, the query behind every worker tick,
 * docs/protocol.md §6.6) on an empty dm_delivery_state and on one holding 1 000 000 terminal rows (delivered/failed):
 * through the partial index `WHERE state = 'accepted'` its cost must not grow with history. Prints one
 * JSON line: median/p99 µs per scan for both, the same query forced past the index (NOT INDEXED) on the
 * full table for contrast, the bulk-insert rate, and EXPLAIN QUERY PLAN of the store's own statement.
 *
 * Env: BENCH_TERMINAL_ROWS (1000000), BENCH_SCANS (2000).
 */
import { machine } from './lib/machine.js';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import type { SqliteStore } from '../src/server/store/sqlite/store.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';

const TERMINAL_ROWS = Number(process.env.BENCH_TERMINAL_ROWS ?? 1_000_000);
const SCANS = Number(process.env.BENCH_SCANS ?? 2000);
/** The worker's batch: its queue size (DeliveryEngine default). */
const LIMIT = 1024;

/** The prepared statement the store ran for dueDeliveries (found in its statement cache by its index hint). */
function dueStatement(store: SqliteStore): Database.Statement {
  const cache = (store.db as unknown as { statements: Map<string, Database.Statement> }).statements;
  const s = [...cache.values()].find((st) => st.source.includes('INDEXED BY dm_delivery_state_due'));
  if (!s) throw new Error('dueDeliveries statement not found in the store cache');
  return s;
}

/** Median and p99 of `runs` timed calls, in µs (after a warm-up). */
async function timeScans(
  fn: () => Promise<unknown> | unknown,
  runs: number,
): Promise<{ medianUs: number; p99Us: number }> {
  for (let i = 0; i < Math.min(200, runs); i++) await fn();
  const us: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    await fn();
    us.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  us.sort((a, b) => a - b);
  const at = (p: number): number => Number(us[Math.min(us.length - 1, Math.floor(us.length * p))]!.toFixed(1));
  return { medianUs: at(0.5), p99Us: at(0.99) };
}

const dir = mkdtempSync(join(os.tmpdir(), 'shine-due-scan-'));
try {
  const store = openSqliteStore({ path: join(dir, 'shine.sqlite'), sync: 'full' });
  await store.migrate();
  const now = Date.now();
  const scan = () => store.delivery.dueDeliveries(now, LIMIT);
  const empty = await timeScans(scan, SCANS);

  // Terminal rows as the engine leaves them: no next attempt, no lease. One transaction, one statement.
  const conn = store.db.conn;
  const insert = conn.prepare(
    `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
       reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version, last_error, updated_at_ms)
     VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, NULL, NULL, 3, ?, ?)`,
  );
  const t0 = performance.now();
  conn.transaction(() => {
    for (let i = 0; i < TERMINAL_ROWS; i++) {
      const failed = i % 10 === 9;
      const from = `user${i % 5000}`;
      const to = `peer${(i * 7) % 5000}`;
      const timeMs = now - 3_600_000 - (TERMINAL_ROWS - i);
      const base = `${from}|${to}|${timeMs}|${i}`;
      insert.run(
        `${base}|2`,
        base,
        from,
        to,
        failed ? 'failed' : 'delivered',
        failed ? 5 : 1,
        timeMs,
        failed ? 'no route answered' : null,
        timeMs,
      );
    }
  })();
  const insertSeconds = (performance.now() - t0) / 1000;
  conn.pragma('wal_checkpoint(TRUNCATE)');
  conn.exec('ANALYZE');

  const full = await timeScans(scan, SCANS);
  const statement = dueStatement(store);
  const plan = conn.prepare(`EXPLAIN QUERY PLAN ${statement.source}`).all(now, now, LIMIT) as { detail: string }[];
  const unindexed = conn.prepare(statement.source.replace('INDEXED BY dm_delivery_state_due', 'NOT INDEXED'));
  const fullTableScan = await timeScans(() => unindexed.all(now, now, LIMIT), Math.max(5, Math.floor(SCANS / 100)));
  const counts = await store.delivery.countDeliveriesByState();
  await store.close();

  console.log(
    JSON.stringify({
      bench: 'due-scan',
      date: new Date().toISOString(),
      machine: machine(),
      durability: 'SQLite WAL + synchronous=FULL (the default; the scan itself is a read)',
      query: `store.delivery.dueDeliveries(now, ${LIMIT})`,
      scans: SCANS,
      emptyTable: { rows: 0, ...empty },
      terminalRows: { rows: TERMINAL_ROWS, byState: counts, ...full },
      growthMedian: Number((full.medianUs / empty.medianUs).toFixed(2)),
      contrastNotIndexed: { note: 'the same query with NOT INDEXED on the full table', ...fullTableScan },
      bulkInsert: {
        rows: TERMINAL_ROWS,
        seconds: Number(insertSeconds.toFixed(2)),
        rowsPerSec: Math.round(TERMINAL_ROWS / insertSeconds),
        transactions: 1,
      },
      queryPlan: plan.map((r) => r.detail),
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
