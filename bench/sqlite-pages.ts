/**
 * The SQLite store's page size, measured in this process (no network, no signature checks): for each
 * page size in turn (alternating, BENCH_ROUNDS rounds, a fresh database file each), it
 *  - seeds BENCH_SEED pairs between 20 senders and 20 recipients (untimed, groups of 500);
 *  - writes BENCH_PAIRS more as SendMessagePair stores them for a recipient on this server: two copies,
 *    two outbox rows, a `delivered` row with its receipt, in group commits of BENCH_GROUP pairs from
 *    different senders (what 20 clients with one request in flight give a server);
 *  - reads history pages (GetDirectMessages, 50 copies) and the replication source's outbox pages
 *    (DmSync, 100 rows) of those users.
 * Prints one JSON line: per page size the median over the rounds of the CPU time (user + system) per
 * pair written, the WAL bytes written per pair, and the CPU time per page read. Durability: WAL +
 * synchronous=FULL (BENCH_SYNC=normal for NORMAL), checkpoints in COMMIT at 4 MiB of WAL (not on the
 * store's checkpoint thread).
 *
 * Env: BENCH_PAGE_SIZES (1024,2048,4096), BENCH_ROUNDS (3), BENCH_SEED (20000), BENCH_PAIRS (10000),
 * BENCH_GROUP (10), BENCH_READS (2000), BENCH_SYNC (full), BENCH_SCHEMAS (the number of migrations to apply,
 * a list to compare schema versions side by side, e.g. 7,8; default all: results are then keyed by page size
 * alone, else by `size@migrations`).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { messageKeyOf } from '../src/protocol/container.js';
import { receiptFor } from '../src/server/delivery/receipts.js';
import { keyFromSeed } from '../src/server/keys.js';
import { SQLITE_MIGRATIONS } from '../src/server/store/sqlite/migrations.js';
import { openSqliteStore, type SqliteStore } from '../src/server/store/sqlite/store.js';
import { pairOf, seedFor } from '../test/helpers/replication.js';
import { machine } from './lib/machine.js';
import { median } from './lib/percentile.js';

const PAGE_SIZES = (process.env.BENCH_PAGE_SIZES ?? '1024,2048,4096').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SEED = Number(process.env.BENCH_SEED ?? 20_000);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 10_000);
const GROUP = Number(process.env.BENCH_GROUP ?? 10);
const READS = Number(process.env.BENCH_READS ?? 2000);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const SCHEMAS = (process.env.BENCH_SCHEMAS ?? String(SQLITE_MIGRATIONS.length)).split(',').map(Number);
const USERS = 20;

const key = keyFromSeed(seedFor('bench'));
const sign = (text: string): string => key.sign(text);
const base = Date.now() - 3_600_000;
/** Pair i goes from sender i mod 20 to its recipient, so consecutive pairs have different owners. */
function makePair(i: number) {
  const u = i % USERS;
  const t = base + i;
  const { incoming, outgoing } = pairOf(
    { from: `alice${u}`, to: `bob${u}`, timeMs: t, nonce: i },
    { kind: 'text', bodyBytes: 96 },
  );
  const proof = receiptFor('bench', sign, { ...incoming, messageKey: messageKeyOf(incoming), storedAtMs: t });
  return {
    incoming,
    outgoing,
    t,
    proof,
    owners: new Map([
      [`alice${u}`, false],
      [`bob${u}`, false],
    ]),
  };
}
const pairs = Array.from({ length: SEED + PAIRS }, (_, i) => makePair(i));
const extra = Array.from({ length: Math.min(PAIRS, 2000) }, (_, i) => makePair(SEED + PAIRS + i));

const store1 = (store: SqliteStore, p: ReturnType<typeof makePair>): Promise<unknown> =>
  store.messages.storePair({
    incoming: p.incoming,
    outgoing: p.outgoing,
    nowMs: p.t,
    outbox: { owners: p.owners },
    delivery: { state: 'delivered', attempt: 1, acceptedAtMs: p.t, nextAttemptAtMs: null, proof: p.proof },
    silent: true,
  });

/** Stores list in group commits of `group` pairs each, one after another. */
async function storeInGroups(store: SqliteStore, list: ReturnType<typeof makePair>[], group: number): Promise<void> {
  for (let i = 0; i < list.length; i += group) await Promise.all(list.slice(i, i + group).map((p) => store1(store, p)));
}

const cpuMicros = (since: NodeJS.CpuUsage): number => {
  const c = process.cpuUsage(since);
  return c.user + c.system;
};

interface Round {
  writeCpuMicrosPerPair: number;
  writePairsPerSec: number;
  walBytesPerPair: number;
  historyPageCpuMicros: number;
  syncPageCpuMicros: number;
  dbBytesPerPair: number;
}

async function round(pageSize: number, migrations: number): Promise<Round> {
  const dir = mkdtempSync(join(os.tmpdir(), 'shine-bench-pages-'));
  const path = join(dir, 'shine.sqlite');
  // Checkpoints in COMMIT, as SQLite does by default: the WAL's bytes are counted from its file, which a
  // checkpoint thread would start over in the middle of the count.
  const store = openSqliteStore({ path, sync: SYNC, pageSize, checkpoints: 'commit' });
  store.db.migrate(migrations);
  await storeInGroups(store, pairs.slice(0, SEED), 500);
  // The WAL's frames, counted by SQLite itself: no checkpoint runs while they are counted.
  store.db.conn.pragma('wal_checkpoint(TRUNCATE)');
  const autocheckpoint = store.db.conn.pragma('wal_autocheckpoint', { simple: true }) as number;

  // Writes, timed, with the store's own checkpoints.
  const timed = pairs.slice(SEED);
  let cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await storeInGroups(store, timed, GROUP);
  const writeCpu = cpuMicros(cpu0);
  const writeSeconds = (performance.now() - t0) / 1000;

  // The same writes' WAL bytes, measured apart: a second batch of the same shape with checkpoints off.
  store.db.conn.pragma('wal_checkpoint(TRUNCATE)');
  store.db.conn.pragma('wal_autocheckpoint = 0');
  await storeInGroups(store, extra, GROUP);
  const walBytes = statSync(`${path}-wal`).size;
  store.db.conn.pragma(`wal_autocheckpoint = ${autocheckpoint}`);
  store.db.conn.pragma('wal_checkpoint(TRUNCATE)');
  const dbBytes = statSync(path).size;

  // Reads: the newest history page of each recipient, and the first outbox page of each sender.
  cpu0 = process.cpuUsage();
  for (let r = 0; r < READS; r++) {
    const page = await store.messages.getDirectMessages({
      owner: `bob${r % USERS}`,
      peer: `alice${r % USERS}`,
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 50,
    });
    if (page.items.length !== 50) throw new Error(`history page of ${page.items.length}`);
  }
  const historyCpu = cpuMicros(cpu0);
  cpu0 = process.cpuUsage();
  for (let r = 0; r < READS; r++) {
    const page = await store.replication.dmSyncPage({
      owner: `alice${r % USERS}`,
      ackSyncIds: [],
      afterStoredAtMs: 0,
      afterKey: '',
      limit: 100,
      maxBytes: 1 << 20,
    });
    if (page.items.length !== 100) throw new Error(`outbox page of ${page.items.length}`);
  }
  const syncCpu = cpuMicros(cpu0);
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  return {
    writeCpuMicrosPerPair: writeCpu / PAIRS,
    writePairsPerSec: PAIRS / writeSeconds,
    walBytesPerPair: walBytes / extra.length,
    historyPageCpuMicros: historyCpu / READS,
    syncPageCpuMicros: syncCpu / READS,
    dbBytesPerPair: dbBytes / (SEED + PAIRS + extra.length),
  };
}

const loadBefore = os.loadavg()[0]!;
const variants = PAGE_SIZES.flatMap((size) =>
  SCHEMAS.map((m) => ({ size, m, name: SCHEMAS.length > 1 ? `${size}@${m}` : String(size) })),
);
const rounds = new Map<string, Round[]>(variants.map((v) => [v.name, []]));
for (let r = 0; r < ROUNDS; r++) for (const v of variants) rounds.get(v.name)!.push(await round(v.size, v.m));
const results = Object.fromEntries(
  [...rounds].map(([size, rs]) => [
    size,
    Object.fromEntries(
      (Object.keys(rs[0]!) as (keyof Round)[]).map((k) => [k, Math.round(median(rs.map((x) => x[k])))]),
    ),
  ]),
);
console.log(
  JSON.stringify({
    bench: 'sqlite-pages',
    date: new Date().toISOString(),
    machine: { ...machine(), loadAvg1mBefore: Number(loadBefore.toFixed(2)) },
    durability: SYNC === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
    seedPairs: SEED,
    pairs: PAIRS,
    pairsPerCommit: GROUP,
    reads: READS,
    rounds: ROUNDS,
    results,
  }),
);
