/**
 * SendMessagePair throughput into one server process from concurrent clients.
 * Prints one JSON line with pairs/s, answer latency, the server's CPU and peak memory, for each
 * durability level (SQLite WAL + synchronous FULL, the default, and NORMAL).
 *
 * Env: BENCH_CLIENTS (20), BENCH_PAIRS (pairs per client, 500), BENCH_WINDOW (requests in flight per
 * client, 1), BENCH_WARMUP (pairs per client sent first and not counted, 0), BENCH_SYNC (full,normal);
 * SHINE_SQLITE_WRITER (inline, thread, auto) is passed to the server.
 */
import { machine, sqliteWriter } from './lib/machine.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServerProcess } from '../test/helpers/server-process.js';
import { UNLIMITED_RATE, runSendLoad } from './lib/send-load.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 500);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 1);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 0);
const LEVELS = (process.env.BENCH_SYNC ?? 'full,normal').split(',') as ('full' | 'normal')[];

async function run(sync: 'full' | 'normal'): Promise<Record<string, unknown>> {
  const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
  writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
  await using server = await startServerProcess({
    env: { SHINE_SQLITE_SYNC: sync, SHINE_LOG_LEVEL: 'warn', SHINE_CONFIG_FILE: configFile },
  });
  let cpu0 = 0;
  let clientCpu0 = process.cpuUsage();
  const r = await runSendLoad({
    wsUrls: [server.wsUrl],
    clients: CLIENTS,
    pairsPerClient: PAIRS,
    window: WINDOW,
    warmupPerClient: WARMUP,
    onStart: () => {
      cpu0 = server.cpuMs();
      clientCpu0 = process.cpuUsage();
    },
  });
  const cpuMs = server.cpuMs() - cpu0;
  const clientCpu = process.cpuUsage(clientCpu0);
  return {
    durability: sync === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
    sqliteWriter: sqliteWriter(),
    ...r,
    serverCpuPercent: Math.round((cpuMs / (r.seconds * 1000)) * 100),
    clientCpuPercent: Math.round((clientCpu.user + clientCpu.system) / 1000 / (r.seconds * 10)),
    serverPeakRssMiB: Math.round(server.peakRssKiB() / 1024),
  };
}

const results: Record<string, unknown> = {};
for (const level of LEVELS) results[level] = await run(level);
console.log(
  JSON.stringify({
    bench: 'send-pairs',
    date: new Date().toISOString(),
    machine: machine(),
    clients: CLIENTS,
    window: WINDOW,
    warmupPerClient: WARMUP,
    recipient: 'local (same server)',
    results,
  }),
);
