/**
 * SendMessagePair into one server on each database it runs on, side by side in one run
 * (docs/protocol.md §9, §9.2):
 *  - sqlite: one process, SQLite WAL + synchronous=FULL;
 *  - postgres: one process, PostgreSQL with synchronous_commit on (its fsync setting is printed too);
 *  - postgres×2: two processes of the same server on the same PostgreSQL database and one Redis, the
 *    clients spread over both (as a load balancer would).
 * Each run gets a fresh database. Prints one JSON line with pairs/s, answer p50/p99, the servers' CPU
 * and on PostgreSQL its backends' CPU (percent of one core, processes summed) for each, and the ratios asked for: PostgreSQL against
 * SQLite with one process, and PostgreSQL with two processes against one.
 *
 * Env: BENCH_CLIENTS (20), BENCH_PAIRS (pairs per client, 300), BENCH_WINDOW (requests in flight per
 * client, 2), BENCH_KINDS (which runs, of sqlite,postgres,postgres2; all three), SHINE_TEST_PG_URL /
 * SHINE_TEST_REDIS_URL (the machine's defaults).
 */
import { machine, postgresDurability } from './lib/machine.js';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerProcess } from '../test/helpers/server-process.js';
import { startServerProcess } from '../test/helpers/server-process.js';
import { backendCpuMeter } from './lib/pg-cpu.js';
import { freshRedisPrefix, freshTestDb, testRedisUrl } from '../test/helpers/test-db.js';
import { UNLIMITED_RATE, runSendLoad } from './lib/send-load.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 300);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 2);

async function run(kind: 'sqlite' | 'postgres', processes: number): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'shine-bench-db-'));
  const configFile = join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
  const db = await freshTestDb(dir, kind, { durable: true });
  const env: Record<string, string> = {
    SHINE_DB: db.url,
    SHINE_LOG_LEVEL: 'warn',
    SHINE_CONFIG_FILE: configFile,
    SHINE_SQLITE_SYNC: 'full',
    SHINE_SERVER_KEY_SEED_B64: randomBytes(32).toString('base64'),
    ...(processes > 1 ? { SHINE_REDIS_URL: testRedisUrl(), SHINE_REDIS_PREFIX: freshRedisPrefix() } : {}),
  };
  const servers: ServerProcess[] = [];
  try {
    // One after the other: the first migrates, the others find the schema in place.
    for (let i = 0; i < processes; i++) servers.push(await startServerProcess({ env }));
    let cpu0 = 0;
    const cpu = (): number => servers.reduce((sum, s) => sum + s.cpuMs(), 0);
    const dbCpu = await backendCpuMeter(kind === 'postgres' ? [db.url] : []);
    const r = await runSendLoad({
      wsUrls: servers.map((s) => s.wsUrl),
      clients: CLIENTS,
      pairsPerClient: PAIRS,
      window: WINDOW,
      onStart: () => {
        cpu0 = cpu();
        dbCpu.mark();
      },
    });
    const dbCpuMs = await dbCpu.msSinceMark();
    const percent = (ms: number): number => Math.round((ms / (r.seconds * 1000)) * 100);
    return {
      processes,
      durability: kind === 'sqlite' ? 'WAL+synchronous=FULL' : await postgresDurability(db.url),
      ...r,
      serverCpuPercent: percent(cpu() - cpu0),
      ...(kind === 'postgres' ? { databaseCpuPercent: percent(dbCpuMs), databaseBackends: dbCpu.backends } : {}),
    };
  } finally {
    await Promise.all(servers.map((s) => s.close()));
    await db.drop();
  }
}

const KINDS = new Set((process.env.BENCH_KINDS ?? 'sqlite,postgres,postgres2').split(','));
const sqlite = KINDS.has('sqlite') ? await run('sqlite', 1) : null;
const postgres = KINDS.has('postgres') ? await run('postgres', 1) : null;
const postgres2 = KINDS.has('postgres2') ? await run('postgres', 2) : null;
const ratio = (a: Record<string, unknown> | null, b: Record<string, unknown> | null): number | null =>
  a && b ? Number(((a.pairsPerSec as number) / (b.pairsPerSec as number)).toFixed(2)) : null;
console.log(
  JSON.stringify({
    bench: 'store-dialects',
    date: new Date().toISOString(),
    machine: machine(),
    clients: CLIENTS,
    window: WINDOW,
    recipient: 'local (same server)',
    results: { sqlite, postgres, 'postgres×2': postgres2 },
    ratios: { postgresVsSqlite: ratio(postgres, sqlite), twoProcessesVsOne: ratio(postgres2, postgres) },
  }),
);
