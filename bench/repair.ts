/**
 * Anti-entropy (docs/protocol.md §7, "Anti-entropy") between two server processes that share one owner:
 *
 * - repair: both hold the owner's BENCH_REPAIR_COPIES copies (default 200 000: text pairs, two copies
 *   each) with every outbox row synced; then the second loses BENCH_LOSS of the pairs (default 10 %: their
 *   copies, outbox and delivery rows, spread over the whole history), and one `POST /admin/repair`
 *   fetches them back (verified, stored with delivery rows). Copies per second.
 * - digest: two equal histories of BENCH_DIGEST_COPIES copies (default 1 000 000) compared by one
 *   `POST /admin/repair`: its time, round trips and bytes, and the time of one local digest of the whole
 *   history from the index in this process.
 *
 * The second server starts first and alone, so its start-up cycle cannot repair anything before the
 * measured request; returns do not start cycles (SHINE_SYNC_ON_RETURN_MS is far off). Prints one JSON line.
 * BENCH_DB=postgres runs both on PostgreSQL instead, each on a fresh database with synchronous_commit on
 * (printed), analyzed after it is built as autovacuum would have.
 * BENCH_BODY_BYTES sets each message body's size (default 96): 60 000 makes copies of about 60 KB, so one
 * DmFetch of 200 keys would be far more than a frame holds (docs/protocol.md decision 59).
 * Env: BENCH_REPAIR_COPIES, BENCH_LOSS, BENCH_DIGEST_COPIES, BENCH_BODY_BYTES, BENCH_SYNC (full | normal; default
 * full), BENCH_DB (sqlite | postgres; sqlite).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { toBase64 } from '../src/protocol/bytes.js';
import { ed25519PublicKey } from '../src/protocol/ed25519.js';
import { signProfile } from '../src/protocol/identity.js';
import type { RepairSummary } from '../src/protocol/ops.js';
import { openPostgresStore } from '../src/server/store/postgres/store.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';
import type { Store } from '../src/server/store/types.js';
import { TEST_DB_POOL_SIZE, freshTestDb, queryTestDb } from '../test/helpers/test-db.js';
import type { ServerProcess } from '../test/helpers/server-process.js';
import { freePort, startServerProcess } from '../test/helpers/server-process.js';
import { ADMIN_TOKEN, adminCall, metricValue, pairOf, seedFor } from '../test/helpers/replication.js';
import { waitUntil } from '../test/helpers/wait.js';
import { machine, postgresDurability } from './lib/machine.js';

const REPAIR_COPIES = Number(process.env.BENCH_REPAIR_COPIES ?? 200_000);
const LOSS = Number(process.env.BENCH_LOSS ?? 0.1);
const DIGEST_COPIES = Number(process.env.BENCH_DIGEST_COPIES ?? 1_000_000);
const BODY_BYTES = Number(process.env.BENCH_BODY_BYTES ?? 96);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const DB = process.env.BENCH_DB === 'postgres' ? 'postgres' : 'sqlite';
const OWNER = 'alice';
const [S1, S2] = ['keeper', 'restored'];

const profile = signProfile(
  {
    login: OWNER,
    signKeyB64: toBase64(ed25519PublicKey(seedFor(OWNER))),
    encKeyB64: toBase64(new Uint8Array(32).fill(7)),
    accessServers: [S1, S2],
    version: 1,
    updatedAtMs: Date.now(),
  },
  seedFor(OWNER),
);

/** Two server databases holding the same `copies` of OWNER (text pairs to bob), every outbox row synced. */
async function buildPair(
  copies: number,
): Promise<{ dirs: [string, string]; urls: [string, string]; baseMs: number; seconds: number }> {
  const started = performance.now();
  const dirs: [string, string] = [
    mkdtempSync(join(os.tmpdir(), 'shine-repair-1-')),
    mkdtempSync(join(os.tmpdir(), 'shine-repair-2-')),
  ];
  // SQLite: shine.sqlite in each one's directory; PostgreSQL: a database each that waits for the WAL flush.
  const urls = (await Promise.all(dirs.map((d) => freshTestDb(d, DB, { durable: true })))).map((db) => db.url) as [
    string,
    string,
  ];
  const stores = urls.map(openBenchStore);
  for (const s of stores) {
    await s.migrate();
    await s.directory.putUser(profile, 'local', Date.now());
  }
  const baseMs = Date.now() - 7_200_000 - copies;
  const outbox = { owners: new Map([[OWNER, true]]) };
  const WINDOW = 2048;
  for (let start = 0; start < copies / 2; start += WINDOW) {
    const pairs = Array.from({ length: Math.min(WINDOW, copies / 2 - start) }, (_, i) =>
      pairOf(
        { from: OWNER, to: 'bob', timeMs: baseMs + 2 * (start + i), nonce: start + i },
        { kind: 'text', bodyBytes: BODY_BYTES },
      ),
    );
    await Promise.all(
      stores.flatMap((s) =>
        pairs.map((p) =>
          s.messages.storePair({
            incoming: p.incoming,
            outgoing: p.outgoing,
            nowMs: baseMs,
            outbox,
            delivery: { state: 'delivered', attempt: 1, acceptedAtMs: baseMs, nextAttemptAtMs: null },
          }),
        ),
      ),
    );
  }
  for (const s of stores) await s.close();
  if (DB === 'postgres') for (const url of urls) await queryTestDb(url, 'ANALYZE');
  return { dirs, urls, baseMs, seconds: (performance.now() - started) / 1000 };
}

function openBenchStore(url: string): Store {
  return DB === 'sqlite'
    ? openSqliteStore({ path: url.slice('sqlite:'.length), sync: SYNC })
    : openPostgresStore({ url, poolSize: TEST_DB_POOL_SIZE });
}

/** Removes every 1/LOSS-th pair of the database (copies, outbox and delivery rows); answers copies lost. */
async function losePairs(url: string, copies: number, baseMs: number): Promise<number> {
  const every = Math.round(1 / LOSS);
  const keys: string[] = [];
  for (let i = 0; i < copies / 2; i += every) keys.push(`${OWNER}|bob|${baseMs + 2 * i}|${i}`);
  // In slices, so that no statement lists more values than either database takes.
  for (let at = 0; at < keys.length; at += 200) {
    const slice = keys.slice(at, at + 200);
    const list = (suffixes: string[]) => slice.flatMap((k) => suffixes.map((x) => `${k}|${x}`));
    const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');
    const copyKeys = list(['1', '2']);
    await queryTestDb(url, `DELETE FROM signed_messages WHERE message_key IN (${marks(copyKeys.length)})`, copyKeys);
    const outgoing = list(['2']);
    await queryTestDb(
      url,
      `DELETE FROM dm_sync_outbox WHERE owner_login = ? AND primary_message_key IN (${marks(outgoing.length)})`,
      [OWNER, ...outgoing],
    );
    await queryTestDb(url, `DELETE FROM dm_delivery_state WHERE outgoing_key IN (${marks(outgoing.length)})`, outgoing);
  }
  return keys.length * 2;
}

/** The two servers on those databases; the restored one starts first, alone. */
async function startBoth(dirs: [string, string], urls: [string, string]): Promise<[ServerProcess, ServerProcess]> {
  const [p1, p2] = await Promise.all([freePort(), freePort()]);
  const env = (login: string, dir: string, url: string, peer: string, peerPort: number) => ({
    SHINE_SERVER_LOGIN: login,
    SHINE_DATA_DIR: dir,
    SHINE_DB: url,
    SHINE_SQLITE_SYNC: SYNC,
    SHINE_ADMIN_TOKEN: ADMIN_TOKEN,
    SHINE_PEERS: `${peer}=ws://127.0.0.1:${peerPort}/ws`,
    SHINE_SYNC_INTERVAL_MS: '1000000000',
    SHINE_SYNC_ON_RETURN_MS: '1000000000',
    SHINE_LOG_LEVEL: 'warn',
  });
  const restored = await startServerProcess({ port: p2, env: env(S2, dirs[1], urls[1], S1, p1) });
  const keeper = await startServerProcess({ port: p1, env: env(S1, dirs[0], urls[0], S2, p2) });
  // The keeper's start-up cycle (a pull and a repair of its own) is over before anything is measured.
  await waitUntil(async () => (await metricValue(keeper.httpUrl, 'sync_cycles_total')) >= 1, 600_000, 'start-up cycle');
  return [keeper, restored];
}

const repair = (s: ServerProcess) => adminCall<RepairSummary>(s.httpUrl, 'POST', `/admin/repair?owner=${OWNER}`);

// ---- repair rate ----
const loadBefore = Number(os.loadavg()[0]!.toFixed(2));
const built = await buildPair(REPAIR_COPIES);
const lost = await losePairs(built.urls[1], REPAIR_COPIES, built.baseMs);
let repairResult: Record<string, unknown>;
{
  const [keeper, restored] = await startBoth(built.dirs, built.urls);
  const cpu0 = [keeper.cpuMs(), restored.cpuMs()];
  const t0 = performance.now();
  const summary = await repair(restored);
  const seconds = (performance.now() - t0) / 1000;
  if (summary.errors !== 0 || summary.copiesRepaired !== lost)
    throw new Error(`repaired ${summary.copiesRepaired} of ${lost} copies: ${JSON.stringify(summary)}`);
  const again = await repair(restored);
  if (again.roundTrips !== 1 || again.differences !== 0)
    throw new Error(`not equal after the repair: ${JSON.stringify(again)}`);
  repairResult = {
    copies: REPAIR_COPIES,
    lostCopies: lost,
    buildSeconds: Number(built.seconds.toFixed(1)),
    seconds: Number(seconds.toFixed(2)),
    copiesPerSec: Math.round(lost / seconds),
    bodyBytes: BODY_BYTES,
    containerMBPerSec: Number(((lost * (BODY_BYTES + 172)) / seconds / 1e6).toFixed(1)),
    rangesCompared: summary.rangesCompared,
    roundTrips: summary.roundTrips,
    bytesExchanged: summary.bytes,
    restoredCpuPercent: Math.round(((restored.cpuMs() - cpu0[1]!) / (seconds * 1000)) * 100),
    keeperCpuPercent: Math.round(((keeper.cpuMs() - cpu0[0]!) / (seconds * 1000)) * 100),
    afterwards: { roundTrips: again.roundTrips, differences: again.differences },
  };
  await Promise.all([keeper.close(), restored.close()]);
  for (const d of built.dirs) rmSync(d, { recursive: true, force: true });
}

// ---- digest cost ----
const equal = await buildPair(DIGEST_COPIES);
let digestResult: Record<string, unknown>;
{
  const [keeper, restored] = await startBoth(equal.dirs, equal.urls);
  const cpu0 = [keeper.cpuMs(), restored.cpuMs()];
  const t0 = performance.now();
  const summary = await repair(restored);
  const seconds = (performance.now() - t0) / 1000;
  if (summary.roundTrips !== 1 || summary.differences !== 0)
    throw new Error(`equal histories differ: ${JSON.stringify(summary)}`);
  const cpu = [keeper.cpuMs() - cpu0[0]!, restored.cpuMs() - cpu0[1]!];
  await Promise.all([keeper.close(), restored.close()]);
  // One digest of the whole history from the index, in this process (what each side does per comparison).
  const store = openBenchStore(equal.urls[1]);
  const d0 = performance.now();
  const [bucket] = await store.replication.dmDigest(OWNER, [{ fromTimeMs: 0, toTimeMs: Date.now() + 86_400_000 }]);
  const localDigestMs = performance.now() - d0;
  await store.close();
  if (bucket!.count !== DIGEST_COPIES) throw new Error(`digest counted ${bucket!.count} of ${DIGEST_COPIES}`);
  digestResult = {
    copies: DIGEST_COPIES,
    buildSeconds: Number(equal.seconds.toFixed(1)),
    repairRequestMs: Math.round(seconds * 1000),
    roundTrips: summary.roundTrips,
    bytesExchanged: summary.bytes,
    restoredCpuMs: Math.round(cpu[1]!),
    keeperCpuMs: Math.round(cpu[0]!),
    localDigestMs: Math.round(localDigestMs),
    localDigestCopiesPerSec: Math.round(DIGEST_COPIES / (localDigestMs / 1000)),
  };
  for (const d of equal.dirs) rmSync(d, { recursive: true, force: true });
}

console.log(
  JSON.stringify({
    bench: 'repair',
    date: new Date().toISOString(),
    machine: { ...machine(), loadAvg1mBefore: loadBefore, loadAvg1mAfter: Number(os.loadavg()[0]!.toFixed(2)) },
    db: DB,
    durability:
      DB === 'postgres'
        ? await postgresDurability(equal.urls[1])
        : SYNC === 'full'
          ? 'WAL+synchronous=FULL'
          : 'WAL+synchronous=NORMAL',
    repair: repairResult,
    digest: digestResult,
  }),
);
