/**
 * Federated delivery between two server processes on this machine (bench/lib/federated-load.ts):
 * alice<i>@A → bob<i>@B. Prints one JSON line with throughput until `delivered` and send → delivered
 * latency at a fixed rate, both servers' CPU, peak RSS and read/write syscalls per pair (throughput phase),
 * and the disk's floor under that latency (bench/lib/fsync-floor.ts: one fdatasync's p50/p99, measured first). The per-connection rate limit is lifted on
 * both servers, so no 429 is measured. Durability: SQLite WAL + synchronous=FULL on both servers
 * (BENCH_SYNC=normal for NORMAL). BENCH_DB=postgres runs both on PostgreSQL instead, each server on a fresh
 * database of its own with synchronous_commit on (printed).
 *
 * Env: BENCH_CLIENTS (20), BENCH_PAIRS (pairs per client, 150), BENCH_WINDOW (4), BENCH_WARMUP (pairs per
 * client sent and delivered before the throughput clock starts, not counted; 0), BENCH_RATE (200),
 * BENCH_SECONDS (10), BENCH_SYNC (full), BENCH_DB (sqlite | postgres; sqlite), BENCH_TAIL (0; 1 adds `fixedRate.tail`: which GC pauses and event-loop
 * stalls of A, B, this process and an idle witness process the pairs at or above the p99 overlapped,
 * bench/lib/tail.ts; and `stallFloor`: an idle process's stalls in 10 s before the servers start), BENCH_RTT_MS (0: a
 * round trip between A and B through relays that hold every chunk half that long each way, bench/lib/delay-link.ts).
 */
import { machine } from './lib/machine.js';
import { runFederatedSend } from './lib/federated-load.js';
import { fsyncFloor } from './lib/fsync-floor.js';
import { idleStallFloor } from './lib/tail.js';

const RTT_MS = Number(process.env.BENCH_RTT_MS ?? 0);
// The disk's floor under target 2, measured before the servers start.
const floor = await fsyncFloor({ perSec: Number(process.env.BENCH_RATE ?? 200) });
// With BENCH_TAIL=1, the machine's own stalls too: an idle process's, for 10 s.
const stallFloor = process.env.BENCH_TAIL === '1' ? await idleStallFloor(10) : undefined;
const r = await runFederatedSend({
  clients: Number(process.env.BENCH_CLIENTS ?? 20),
  pairs: Number(process.env.BENCH_PAIRS ?? 150),
  window: Number(process.env.BENCH_WINDOW ?? 4),
  warmup: Number(process.env.BENCH_WARMUP ?? 0),
  rate: Number(process.env.BENCH_RATE ?? 200),
  seconds: Number(process.env.BENCH_SECONDS ?? 10),
  sync: process.env.BENCH_SYNC === 'normal' ? 'normal' : 'full',
  db: process.env.BENCH_DB === 'postgres' ? 'postgres' : 'sqlite',
  tail: process.env.BENCH_TAIL === '1',
  rttMs: RTT_MS,
});
console.log(
  JSON.stringify({
    bench: 'federated-send',
    date: new Date().toISOString(),
    machine: machine(),
    durability: r.durability,
    db: r.db,
    sqliteWriter: r.sqliteWriter,
    setup: `A and B are separate \`shine serve\` processes on loopback${RTT_MS > 0 ? `, each calling the other over a ${RTT_MS} ms round trip` : ''}, s2sAuth required, per-connection rate limit lifted; client, A and B share the cores`,
    linkRttMs: RTT_MS,
    throughput: r.throughput,
    fixedRate: r.fixedRate,
    peakRssMiB: r.peakRssMiB,
    fsyncFloor: floor,
    ...(stallFloor ? { stallFloor } : {}),
  }),
);
