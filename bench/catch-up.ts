/**
 * Catch-up sync into an empty peer (docs/protocol.md §7): BENCH_EVENTS text pairs (default 200 000) of one owner
 * are pre-signed and inserted through the store of the source server, each delivered with the source's
 * signed receipt as its proof (the recipient is on the source too, docs/protocol.md §13.1), then a fresh
 * puller server pulls them in one cycle (POST /admin/sync), verifying both signatures of every pair and
 * its receipt (three checks per event) and writing it with its outbox and delivery rows. Both servers are separate processes, so the puller's peak memory is its
 * own VmHWM. The raw Ed25519 verify rate (sodium-native) is measured in the same run for comparison.
 * Prints one JSON line.
 *
 * BENCH_PROOFS=0 seeds the workload of the measurements before receipts instead: pairs stored more than
 * an hour ago and never delivered (failed at the source, filed as failed by the puller, no re-send), so
 * two signature checks per event and no receipt.
 *
 * BENCH_DB=postgres runs both servers on PostgreSQL instead, each on a fresh database of its own with
 * synchronous_commit on (printed).
 *
 * BENCH_OWNERS=N spreads the events over N owners (owner0 … owner(N−1), each a user of both servers), as when a server
 * catches up on many users at once.
 *
 * Then one more cycle runs, with nothing left to pull (`idleCycle`): what every periodic cycle costs, each user's
 * round trips to the peer. And then one `POST /admin/repair` of every shared user, the histories equal (`repairAll`).
 *
 * BENCH_RTT_MS puts a relay between the two servers that holds every byte for half that time each way
 * (bench/lib/delay-link.ts): a round trip of that many milliseconds, as between two data centres.
 *
 * Env: BENCH_EVENTS (200000), BENCH_SYNC (full | normal; default full = WAL + synchronous FULL),
 * BENCH_PROOFS (1), BENCH_DB (sqlite | postgres; sqlite), BENCH_OWNERS (1), BENCH_RTT_MS (0).
 */
import { startDelayLink } from './lib/delay-link.js';
import { machine, postgresDurability } from './lib/machine.js';
import { backendCpuMeter } from './lib/pg-cpu.js';
import { seedPairs } from './lib/seed-pairs.js';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { ed25519PublicKey } from '../src/protocol/ed25519.js';
import { openPostgresStore } from '../src/server/store/postgres/store.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';
import type { Store } from '../src/server/store/types.js';
import { TEST_DB_POOL_SIZE, freshTestDb, queryTestDb } from '../test/helpers/test-db.js';
import { connectRaw } from '../test/helpers/raw-client.js';
import { adminCall, pairOf, seedB64For, seedFor, syncNow, ADMIN_TOKEN } from '../test/helpers/replication.js';
import type { RepairSummary } from '../src/protocol/ops.js';
import { freePort, startServerProcess } from '../test/helpers/server-process.js';
import { makeUser } from '../test/helpers/users.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 200_000);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const PROOFS = process.env.BENCH_PROOFS !== '0';
const CHECKS = PROOFS ? 3 : 2;
const DB = process.env.BENCH_DB === 'postgres' ? 'postgres' : 'sqlite';
const RTT_MS = Number(process.env.BENCH_RTT_MS ?? 0);
const OWNER = 'alice';
const OWNER_COUNT = Math.max(1, Number(process.env.BENCH_OWNERS ?? 1));
const OWNERS = OWNER_COUNT === 1 ? [OWNER] : Array.from({ length: OWNER_COUNT }, (_, i) => `owner${i}`);
/** Pairs of each owner: EVENTS spread evenly. */
const COUNTS = OWNERS.map((_, i) => Math.floor(EVENTS / OWNER_COUNT) + (i < EVENTS % OWNER_COUNT ? 1 : 0));
const SOURCE = 'source';
const PULLER = 'puller';

const sodium = createRequire(import.meta.url)('sodium-native') as {
  crypto_sign_verify_detached(sig: Uint8Array, msg: Uint8Array, pk: Uint8Array): boolean;
};

/** Raw crypto_sign_verify_detached calls per second on one container's signed bytes, best of 4 rounds. */
function rawVerifyRate(msPerRound = 500): number {
  const { outgoing } = pairOf({ from: OWNER, to: 'bob', timeMs: Date.now(), nonce: 1 });
  const msg = outgoing.bytes.subarray(0, outgoing.signedLength);
  const pk = ed25519PublicKey(seedFor(OWNER));
  let best = 0;
  for (let round = 0; round < 4; round++) {
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < msPerRound) {
      for (let i = 0; i < 64; i++)
        if (!sodium.crypto_sign_verify_detached(outgoing.signature, msg, pk)) throw new Error('verify failed');
      n += 64;
    }
    best = Math.max(best, n / ((performance.now() - t0) / 1000));
  }
  return Math.round(best);
}

const profiles = OWNERS.map((login) => makeUser(login, [SOURCE, PULLER], seedFor(login)).profile);

const loadBefore = Number(os.loadavg()[0]!.toFixed(2));
const sampleBytes = pairOf({ from: OWNER, to: 'bob', timeMs: Date.now(), nonce: 0 }, { kind: 'text', bodyBytes: 96 })
  .outgoing.bytes.length;

// ---- the source's data, written through its store before it starts ----
const sourceDir = mkdtempSync(join(os.tmpdir(), 'shine-bench-source-'));
const pullerDir = mkdtempSync(join(os.tmpdir(), 'shine-bench-puller-'));
const [sourcePort, pullerPort] = await Promise.all([freePort(), freePort()]);
// SQLite: shine.sqlite in each one's directory; PostgreSQL: a database each that waits for the WAL flush.
const [sourceDb, pullerDb] = await Promise.all(
  [sourceDir, pullerDir].map((dir) => freshTestDb(dir, DB, { durable: true })),
);
const openBenchStore = (url: string): Store =>
  DB === 'sqlite'
    ? openSqliteStore({ path: url.slice('sqlite:'.length), sync: SYNC })
    : openPostgresStore({ url, poolSize: TEST_DB_POOL_SIZE });
const buildStarted = performance.now();
{
  const store = openBenchStore(sourceDb!.url);
  await store.migrate();
  const baseMs = Date.now() - EVENTS - (PROOFS ? 60_000 : 2 * 3_600_000);
  for (const [i, profile] of profiles.entries()) {
    await store.directory.putUser(profile, 'local', Date.now());
    await seedPairs(store, {
      owner: profile.login,
      to: 'bob',
      serverLogin: SOURCE,
      count: COUNTS[i]!,
      baseMs,
      proofs: PROOFS,
    });
  }
  await store.close();
}
// A source whose history grew over weeks has had its tables analyzed by autovacuum; one written a second ago
// has not, and PostgreSQL would plan its page reads without statistics (a scan of the owner's every row).
if (DB === 'postgres') await queryTestDb(sourceDb!.url, 'ANALYZE');
const buildSeconds = (performance.now() - buildStarted) / 1000;

const common = { SHINE_SYNC_INTERVAL_MS: '1000000000', SHINE_LOG_LEVEL: 'warn', SHINE_SQLITE_SYNC: SYNC };
// Each server dials the other through a link of RTT_MS round trip, or directly (a peer dials the URL its descriptor
// names: the link's).
await using toSource = RTT_MS > 0 ? await startDelayLink(sourcePort, RTT_MS / 2) : null;
await using toPuller = RTT_MS > 0 ? await startDelayLink(pullerPort, RTT_MS / 2) : null;
await using puller = await startServerProcess({
  port: pullerPort,
  env: {
    ...common,
    SHINE_SERVER_LOGIN: PULLER,
    SHINE_DATA_DIR: pullerDir,
    SHINE_DB: pullerDb!.url,
    SHINE_ADMIN_TOKEN: ADMIN_TOKEN,
    SHINE_PEERS: `${SOURCE}=${toSource?.wsUrl ?? `ws://127.0.0.1:${sourcePort}/ws`}`,
    ...(toPuller ? { SHINE_PUBLIC_WS_URL: toPuller.wsUrl } : {}),
  },
});
{
  await using c = await connectRaw(puller.wsUrl);
  for (const profile of profiles) await c.call('RegisterUser', { profile });
}
await using source = await startServerProcess({
  port: sourcePort,
  env: {
    ...common,
    SHINE_SERVER_LOGIN: SOURCE,
    SHINE_SERVER_KEY_SEED_B64: seedB64For(SOURCE),
    SHINE_DATA_DIR: sourceDir,
    SHINE_DB: sourceDb!.url,
    SHINE_PEERS: `${PULLER}=${toPuller?.wsUrl ?? `ws://127.0.0.1:${pullerPort}/ws`}`,
    ...(toSource ? { SHINE_PUBLIC_WS_URL: toSource.wsUrl } : {}),
  },
});

const rawVerifyPerSec = rawVerifyRate();
const idleRssKiB = puller.rssKiB();
// On PostgreSQL, the CPU of each server's database backends (both run on this machine).
const [pullerDbCpu, sourceDbCpu] = await Promise.all(
  [pullerDb!.url, sourceDb!.url].map((url) => backendCpuMeter(DB === 'postgres' ? [url] : [])),
);
pullerDbCpu!.mark();
sourceDbCpu!.mark();
const cpu0 = puller.cpuMs();
const sourceCpu0 = source.cpuMs();
const t0 = performance.now();
const summary = await syncNow(puller.httpUrl);
const seconds = (performance.now() - t0) / 1000;
const pullerCpuMs = puller.cpuMs() - cpu0;
const sourceCpuMs = source.cpuMs() - sourceCpu0;
const [pullerDbCpuMs, sourceDbCpuMs] = await Promise.all([pullerDbCpu!.msSinceMark(), sourceDbCpu!.msSinceMark()]);
if (summary.dmRows !== EVENTS || summary.errors !== 0)
  throw new Error(
    `cycle pulled ${summary.dmRows} of ${EVENTS} rows with ${summary.errors} errors: ${JSON.stringify(summary)}`,
  );
const eventsPerSec = EVENTS / seconds;
// The cycle after it, with nothing left to pull: what every periodic cycle costs (each user's round trips).
const idleStarted = performance.now();
const idle = await syncNow(puller.httpUrl);
const idleCycleSeconds = (performance.now() - idleStarted) / 1000;
if (idle.dmRows !== 0 || idle.errors !== 0) throw new Error(`the cycle after pulled again: ${JSON.stringify(idle)}`);
// An operator's repair of every shared user (POST /admin/repair), the histories equal: one digest round trip a user.
const repairStarted = performance.now();
const repaired = await adminCall<RepairSummary>(puller.httpUrl, 'POST', '/admin/repair');
const repairSeconds = (performance.now() - repairStarted) / 1000;
if (repaired.copiesRepaired !== 0 || repaired.errors !== 0)
  throw new Error(`the repair after found differences: ${JSON.stringify(repaired)}`);
// Every pair must be filed as the source has it: delivered only with its proof checked (a refused proof
// leaves it accepted), or failed.
let wrongState: number;
{
  const store = openBenchStore(pullerDb!.url);
  const states = await store.delivery.countDeliveriesByState();
  await store.close();
  wrongState = EVENTS - states[PROOFS ? 'delivered' : 'failed'];
  if (wrongState !== 0)
    throw new Error(`${wrongState} of ${EVENTS} pairs not in the expected state: ${JSON.stringify(states)}`);
}

console.log(
  JSON.stringify({
    bench: 'catch-up',
    date: new Date().toISOString(),
    machine: {
      ...machine(),
      loadAvg1mBefore: loadBefore,
    },
    db: DB,
    durability:
      DB === 'postgres'
        ? await postgresDurability(pullerDb!.url)
        : SYNC === 'full'
          ? 'WAL+synchronous=FULL'
          : 'WAL+synchronous=NORMAL',
    events: EVENTS,
    owners: OWNER_COUNT,
    linkRttMs: RTT_MS,
    event: `one outbox row: a text pair (2 containers of ${sampleBytes} bytes) ${PROOFS ? 'delivered with a receipt' : 'never delivered, no receipt'}: ${CHECKS} signature checks`,
    buildSeconds: Number(buildSeconds.toFixed(1)),
    catchUp: {
      seconds: Number(seconds.toFixed(2)),
      eventsPerSec: Math.round(eventsPerSec),
      signatureChecksPerSec: Math.round(eventsPerSec * CHECKS),
      wrongState,
      pages: COUNTS.reduce((n, c) => n + Math.ceil(c / 500), 0),
      pullerCpuPercent: Math.round((pullerCpuMs / (seconds * 1000)) * 100),
      sourceCpuPercent: Math.round((sourceCpuMs / (seconds * 1000)) * 100),
      ...(DB === 'postgres'
        ? {
            pullerDatabaseCpuPercent: Math.round((pullerDbCpuMs / (seconds * 1000)) * 100),
            sourceDatabaseCpuPercent: Math.round((sourceDbCpuMs / (seconds * 1000)) * 100),
          }
        : {}),
      pullerIdleRssMiB: Math.round(idleRssKiB / 1024),
      pullerPeakRssMiB: Math.round(puller.peakRssKiB() / 1024),
      loadAvg1mAfter: Number(os.loadavg()[0]!.toFixed(2)),
    },
    idleCycle: {
      what: 'the next cycle, nothing left to pull (settings, DM and anti-entropy round trips of every user)',
      users: idle.users,
      seconds: Number(idleCycleSeconds.toFixed(2)),
    },
    repairAll: {
      what: 'POST /admin/repair of every shared user after the cycles, the histories equal',
      owners: repaired.owners,
      roundTrips: repaired.roundTrips,
      seconds: Number(repairSeconds.toFixed(2)),
    },
    rawVerify: {
      library: 'sodium-native crypto_sign_verify_detached',
      perSec: rawVerifyPerSec,
      note: 'one core, bench process, servers idle',
    },
    signatureChecksToRawVerify: Number(((eventsPerSec * CHECKS) / rawVerifyPerSec).toFixed(3)),
  }),
);
await source.close();
await puller.close();
await Promise.all([sourceDb!.drop(), pullerDb!.drop()]);
rmSync(sourceDir, { recursive: true, force: true });
rmSync(pullerDir, { recursive: true, force: true });
