/**
 * The delivery_rows gauge's read and /debug/delivery's listing on a large SQLite store, in this process (no server): BENCH_ROWS delivery
 * rows (as many `delivered` with a receipt as a server keeps after that many sent messages, 1 in 1 000
 * accepted, 1 in 100 failed) are written in transactions of 10 000 into two fresh stores of this build, in
 * turn, one of them with migration 9's counting triggers dropped first. Prints one JSON line:
 *  - the write's CPU per row with and without the triggers (what counting as rows change costs);
 *  - the store's countDeliveriesByState (three rows of dm_delivery_counts) against the scan it replaced
 *    (`SELECT state, COUNT(*) … GROUP BY state`, the gauge's read every 30 s on the event loop until
 *    migration 9), medians of BENCH_READS reads each on a warm page cache;
 *  - /debug/delivery's listing of each state (the store's listDeliveries, 200 rows) against the statement it
 *    replaced (`WHERE state = ? ORDER BY accepted_at_ms DESC`), the failed one without migration 13's index, and
 *    that migration's time (building the index again).
 * Durability: the seed runs with synchronous=OFF in large transactions (it measures CPU, not fsyncs); the
 * stores are opened with FULL.
 *
 * Env: BENCH_ROWS (1000000), BENCH_READS (5).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { toBase64 } from '../src/protocol/bytes.js';
import { proofJson } from '../src/server/store/rows.js';
import { SQLITE_MIGRATIONS } from '../src/server/store/sqlite/migrations.js';
import { openSqliteStore, type SqliteStore } from '../src/server/store/sqlite/store.js';
import { machine } from './lib/machine.js';
import { median } from './lib/percentile.js';
import { elapsedMs, medianMs } from './lib/timing.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const READS = Number(process.env.BENCH_READS ?? 5);
/** /debug/delivery's default limit. */
const LIST_LIMIT = 200;
const BATCH = 10_000;
const T0 = 1_780_000_000_000;

const dir = mkdtempSync(join(os.tmpdir(), 'shine-bench-counts-'));

/** CPU microseconds (user + system) that fn took. */
function cpuMicros(fn: () => void): number {
  const before = process.cpuUsage();
  fn();
  const used = process.cpuUsage(before);
  return used.user + used.system;
}

/**
 * Writes the same ROWS delivery rows into each store, batch by batch in turn, each batch first into the other
 * store (so both meet the same JIT and cache state); answers the CPU a row took in each.
 */
function seed(stores: SqliteStore[]): number[] {
  const inserts = stores.map((store) => {
    store.db.conn.pragma('synchronous = OFF');
    return store.db.conn.prepare(
      `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
         reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, receipt_json,
         row_version, last_error, updated_at_ms)
       VALUES (?, ?, ?, ?, 0, 0, ?, 1, ?, ?, NULL, ?, 1, ?, ?)`,
    );
  });
  const sha = toBase64(new Uint8Array(32).fill(7));
  const signature = toBase64(new Uint8Array(64).fill(9));
  const cpu = stores.map(() => 0);
  for (let from = 0; from < ROWS; from += BATCH) {
    const rows: unknown[][] = [];
    for (let i = from; i < Math.min(ROWS, from + BATCH); i++) {
      const [sender, recipient, at] = [`user${i % 1000}`, `user${(i * 7 + 1) % 1000}`, T0 + i];
      const base = `${sender}|${recipient}|${at}|${toBase64(new Uint8Array(16).fill(i & 0xff))}`;
      const state = i % 1000 === 0 ? 'accepted' : i % 100 === 0 ? 'failed' : 'delivered';
      const proof =
        state === 'delivered'
          ? proofJson({
              serverLogin: 'beta',
              messageKey: `${base}|1`,
              revisionTimeMs: 0,
              reencryptedAtMs: 0,
              storedAtMs: at + 3,
              containerSha256B64: sha,
              signatureB64: signature,
            })
          : null;
      const next = state === 'accepted' ? at + 60_000 : null;
      const error = state === 'failed' ? 'beta: timeout' : null;
      rows.push([`${base}|2`, base, sender, recipient, state, at, next, proof, error, at]);
    }
    // Each batch goes first into the other store: the first write after building the rows costs more.
    const order = (from / BATCH) % 2 === 0 ? stores.keys() : [...stores.keys()].reverse();
    for (const k of order) {
      const conn = stores[k]!.db.conn;
      cpu[k]! += cpuMicros(() => conn.transaction(() => rows.forEach((r) => inserts[k]!.run(...r)))());
    }
  }
  for (const store of stores) store.db.conn.pragma('synchronous = FULL');
  return cpu.map((c) => c / ROWS);
}

async function opened(name: string, counted: boolean): Promise<SqliteStore> {
  const store = openSqliteStore({ path: join(dir, `${name}.sqlite`), sync: 'full' });
  await store.migrate();
  if (!counted)
    for (const t of ['insert', 'delete', 'update']) store.db.conn.exec(`DROP TRIGGER dm_delivery_counts_${t}`);
  return store;
}

try {
  const plain = await opened('without-triggers', false);
  const store = await opened('with-triggers', true);
  const [writeWith, writeWithout] = seed([store, plain]) as [number, number];
  await plain.close();

  const scan = store.db.conn.prepare('SELECT state, COUNT(*) AS n FROM dm_delivery_state GROUP BY state');
  const scanned = Object.fromEntries((scan.all() as { state: string; n: number }[]).map((r) => [r.state, r.n]));
  const counted = await store.delivery.countDeliveriesByState();
  const times = { scan: [] as number[], counts: [] as number[] };
  for (let i = 0; i < READS; i++) {
    times.scan.push(await elapsedMs(() => scan.all()));
    times.counts.push(await elapsedMs(() => store.delivery.countDeliveriesByState()));
  }
  const sorted = store.db.conn.prepare(
    'SELECT * FROM dm_delivery_state WHERE state = ? ORDER BY accepted_at_ms DESC LIMIT ?',
  );
  const listing: Record<string, { storeMs: number; sortReplacedMs: number; sameRows: boolean }> = {};
  for (const state of ['accepted', 'delivered', 'failed'] as const) {
    const old = sorted.all(state, LIST_LIMIT) as { outgoing_key: string }[];
    const now = await store.delivery.listDeliveries(state, LIST_LIMIT);
    const t = { store: [] as number[], sort: [] as number[] };
    for (let i = 0; i < READS; i++) {
      t.sort.push(await elapsedMs(() => sorted.all(state, LIST_LIMIT)));
      t.store.push(await elapsedMs(() => store.delivery.listDeliveries(state, LIST_LIMIT)));
    }
    listing[state] = {
      storeMs: +median(t.store).toFixed(3),
      sortReplacedMs: +median(t.sort).toFixed(1),
      sameRows: JSON.stringify(old.map((r) => r.outgoing_key)) === JSON.stringify(now.map((r) => r.outgoingKey)),
    };
  }
  // What a failed listing costs without migration 13's index (the statement is prepared again without it).
  store.db.conn.exec('DROP INDEX dm_delivery_state_failed');
  const unindexedMs = await medianMs(READS, () => sorted.all('failed', LIST_LIMIT));
  const migration13Ms = await elapsedMs(() => store.db.conn.exec(SQLITE_MIGRATIONS[12] as string));
  await store.close();
  console.log(
    JSON.stringify({
      bench: 'delivery-counts',
      date: new Date().toISOString(),
      machine: machine(),
      durability: 'stores opened with WAL + synchronous=FULL; the seed writes with synchronous=OFF (CPU only)',
      rows: ROWS,
      counts: counted,
      countsMatchScan: JSON.stringify(counted) === JSON.stringify({ accepted: 0, delivered: 0, failed: 0, ...scanned }),
      writeCpuMicrosPerRow: { withTriggers: +writeWith.toFixed(2), withoutTriggers: +writeWithout.toFixed(2) },
      gaugeReadMs: {
        countsTable: +median(times.counts).toFixed(3),
        scanReplaced: +median(times.scan).toFixed(1),
      },
      debugDeliveryListing: { limit: LIST_LIMIT, ...listing, failedWithoutItsIndexMs: unindexedMs },
      migration13Ms: +migration13Ms.toFixed(0),
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
