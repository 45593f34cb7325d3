/**
 * PostgreSQL's store of pairs alone, in this process (no network, no signature checks): BENCH_EVENTS text
 * pairs of owners of their own stored through PgMessageStore.storePair by three lanes, each asking for
 * BENCH_GROUP pairs at once and waiting for them (group 1: about three pairs a batch, as a lightly loaded
 * server or a federated recipient makes them; 8: batches of about 24, as a busy one). For each group size
 * it prints the CPU this process and the database's backends spent per pair (bench/lib/pg-cpu.ts), which a
 * loaded machine disturbs less than a rate, the pairs/s, and commits per pair. Every connection stores a
 * batch before the clock starts, so each has its statements parsed. Durability: synchronous_commit on,
 * fsync as the server has it (printed).
 *
 * BENCH_SENDER=one sends every pair from one sender (to recipients of their own), as one busy user or a
 * catch-up page of one owner does.
 *
 * Env: BENCH_EVENTS (6000 a group size), BENCH_GROUPS (1,8), BENCH_SENDER (each | one), SHINE_TEST_PG_URL
 * (the machine's default).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPostgresStore } from '../src/server/store/postgres/store.js';
import type { StorePairInput } from '../src/server/store/types.js';
import { pairOf } from '../test/helpers/replication.js';
import { freshTestDb } from '../test/helpers/test-db.js';
import { machine, postgresDurability } from './lib/machine.js';
import { backendCpuMeter } from './lib/pg-cpu.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 6000);
const GROUPS = (process.env.BENCH_GROUPS ?? '1,8').split(',').map(Number);
const ONE_SENDER = process.env.BENCH_SENDER === 'one';
const LANES = 3;
const POOL = 10;
const WARM = 200;

async function run(group: number): Promise<Record<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'shine-bench-pg-'));
  const db = await freshTestDb(dir, 'postgres', { durable: true });
  const store = openPostgresStore({ url: db.url, poolSize: POOL });
  try {
    await store.migrate();
    const t0 = Date.now() - 3_600_000;
    const input = (i: number): StorePairInput => {
      const [from, to] = [ONE_SENDER ? 'alice' : `alice${i}`, `bob${i}`];
      return {
        ...pairOf({ from, to, timeMs: t0 + i, nonce: i }),
        nowMs: t0 + i,
        outbox: {
          owners: new Map([
            [from, false],
            [to, false],
          ]),
        },
        delivery: { state: 'accepted', attempt: 1, acceptedAtMs: t0, nextAttemptAtMs: t0 + 1000 },
      };
    };
    const inputs = Array.from({ length: WARM + EVENTS }, (_, i) => input(i));
    // Every connection of the pool parses the statements before the clock starts.
    await Promise.all(inputs.slice(0, WARM).map((p) => store.messages.storePair(p)));
    const commits0 = store.db.stats.commits;
    const meter = await backendCpuMeter([db.url]);
    meter.mark();
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    let next = WARM;
    const lane = async (): Promise<void> => {
      while (next < inputs.length) {
        const from = next;
        next = Math.min(next + group, inputs.length);
        await Promise.all(inputs.slice(from, next).map((p) => store.messages.storePair(p)));
      }
    };
    await Promise.all(Array.from({ length: LANES }, lane));
    const ms = performance.now() - start;
    const cpu = process.cpuUsage(cpu0);
    return {
      group,
      pairsPerSec: Math.round(EVENTS / (ms / 1000)),
      processCpuUsPerPair: Math.round((cpu.user + cpu.system) / EVENTS),
      databaseCpuUsPerPair: Math.round(((await meter.msSinceMark()) * 1000) / EVENTS),
      pairsPerCommit: Number((EVENTS / (store.db.stats.commits - commits0)).toFixed(1)),
    };
  } finally {
    const durability = await postgresDurability(db.url);
    durabilities.add(durability);
    await store.close();
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const durabilities = new Set<string>();
const results = [];
for (const group of GROUPS) results.push(await run(group));
console.log(
  JSON.stringify({
    bench: 'pg-batches',
    date: new Date().toISOString(),
    machine: machine(),
    durability: [...durabilities].join(' '),
    sender: ONE_SENDER ? 'one' : 'each pair its own',
    lanes: LANES,
    poolSize: POOL,
    results,
  }),
);
