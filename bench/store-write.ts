/**
 * The catch-up puller's write path alone, in this process (no network, no signature checks): BENCH_EVENTS
 * text pairs (default 50 000) written through the SQLite store as replication writes them — silent, with
 * outbox rows and a delivered row carrying its receipt — in groups of BENCH_GROUP issued together (one
 * group commit each: 500 is a catch-up page, 10 what 20 clients with one request in flight give a
 * server). Prints the CPU time (user + system, the checkpoint thread's included) this process spent per
 * pair, which a loaded machine disturbs far less than a throughput, the pairs/s, and how long the event
 * loop was blocked (p99 and max of its delay: a checkpoint in COMMIT blocks it). Durability: WAL +
 * synchronous=FULL (BENCH_SYNC=normal for NORMAL); checkpoints on the store's thread
 * (BENCH_CHECKPOINTS=commit: in COMMIT at 4 MiB of WAL, SQLite's default).
 *
 * Env: BENCH_EVENTS (50000), BENCH_GROUP (500), BENCH_SYNC (full), BENCH_CHECKPOINTS (thread).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { messageKeyOf } from '../src/protocol/container.js';
import { receiptFor } from '../src/server/delivery/receipts.js';
import { keyFromSeed } from '../src/server/keys.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';
import { pairOf, seedFor } from '../test/helpers/replication.js';
import { machine } from './lib/machine.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 50_000);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const PAGE = Number(process.env.BENCH_GROUP ?? 500);
const CHECKPOINTS = (process.env.BENCH_CHECKPOINTS ?? 'thread') as 'thread' | 'commit';

const key = keyFromSeed(seedFor('source'));
const sign = (text: string): string => key.sign(text);
const base = Date.now() - EVENTS - 60_000;
const pairs = Array.from({ length: EVENTS }, (_, i) => {
  const t = base + i;
  const { incoming, outgoing } = pairOf(
    { from: 'alice', to: 'bob', timeMs: t, nonce: i },
    { kind: 'text', bodyBytes: 96 },
  );
  const proof = receiptFor('source', sign, { ...incoming, messageKey: messageKeyOf(incoming), storedAtMs: t });
  return { incoming, outgoing, t, proof };
});

const dir = mkdtempSync(join(os.tmpdir(), 'shine-bench-store-write-'));
const store = openSqliteStore({ path: join(dir, 'shine.sqlite'), sync: SYNC, checkpoints: CHECKPOINTS });
await store.migrate();
const outbox = { owners: new Map([['alice', true]]) };
const loadBefore = os.loadavg()[0]!;
const delay = monitorEventLoopDelay({ resolution: 1 });
delay.enable();
const cpu0 = process.cpuUsage();
const t0 = performance.now();
for (let start = 0; start < EVENTS; start += PAGE) {
  await Promise.all(
    pairs.slice(start, start + PAGE).map(({ incoming, outgoing, t, proof }) =>
      store.messages.storePair({
        incoming,
        outgoing,
        nowMs: Date.now(),
        outbox,
        delivery: { state: 'delivered', attempt: 0, acceptedAtMs: t, nextAttemptAtMs: null, proof },
        silent: true,
      }),
    ),
  );
}
const seconds = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
delay.disable();
const checkpointer = store.db.checkpointer ? { ...store.db.checkpointer.stats } : null;
await store.close();
rmSync(dir, { recursive: true, force: true });
console.log(
  JSON.stringify({
    bench: 'store-write',
    date: new Date().toISOString(),
    machine: { ...machine(), loadAvg1mBefore: Number(loadBefore.toFixed(2)) },
    durability: SYNC === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
    checkpoints: CHECKPOINTS === 'thread' ? 'on the checkpoint thread' : 'in COMMIT at 4 MiB of WAL',
    events: EVENTS,
    event: `a text pair as the catch-up puller writes it: 2 copies, 2 outbox rows, a delivered row with its receipt; groups of ${PAGE} in one group commit each`,
    pairsPerSec: Math.round(EVENTS / seconds),
    cpuMicrosPerPair: Number(((cpu.user + cpu.system) / EVENTS).toFixed(1)),
    userMicrosPerPair: Number((cpu.user / EVENTS).toFixed(1)),
    eventLoopDelayMs: {
      p99: Number((delay.percentile(99) / 1e6).toFixed(1)),
      max: Number((delay.max / 1e6).toFixed(1)),
    },
    checkpointer,
  }),
);
