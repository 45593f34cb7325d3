/**
 * The catch-up puller's write path alone, in this process (no network, no signature checks): BENCH_EVENTS
 * text pairs (default 50 000) written through the SQLite store as replication writes them — silent, with
 * outbox rows and a delivered row carrying its receipt — in pages of 500 issued together (one group
 * commit per page). Prints the CPU time (user + system) this process spent per pair, which a loaded
 * machine disturbs far less than a throughput, and the pairs/s. Durability: WAL + synchronous=FULL
 * (BENCH_SYNC=normal for NORMAL).
 *
 * Env: BENCH_EVENTS (50000), BENCH_SYNC (full).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { messageKeyOf } from '../src/protocol/container.js';
import { receiptFor } from '../src/server/delivery/receipts.js';
import { keyFromSeed } from '../src/server/keys.js';
import { openSqliteStore } from '../src/server/store/sqlite/store.js';
import { pairOf, seedFor } from '../test/helpers/replication.js';
import { machine } from './lib/machine.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 50_000);
const SYNC = (process.env.BENCH_SYNC ?? 'full') as 'full' | 'normal';
const PAGE = 500;

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
const store = openSqliteStore({ path: join(dir, 'shine.sqlite'), sync: SYNC });
await store.migrate();
const outbox = { owners: new Map([['alice', true]]) };
const loadBefore = os.loadavg()[0]!;
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
await store.close();
rmSync(dir, { recursive: true, force: true });
console.log(
  JSON.stringify({
    bench: 'store-write',
    date: new Date().toISOString(),
    machine: { ...machine(), loadAvg1mBefore: Number(loadBefore.toFixed(2)) },
    durability: SYNC === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
    events: EVENTS,
    event: `a text pair as the catch-up puller writes it: 2 copies, 2 outbox rows, a delivered row with its receipt; pages of ${PAGE} in one group commit each`,
    pairsPerSec: Math.round(EVENTS / seconds),
    cpuMicrosPerPair: Number(((cpu.user + cpu.system) / EVENTS).toFixed(1)),
    userMicrosPerPair: Number((cpu.user / EVENTS).toFixed(1)),
  }),
);
