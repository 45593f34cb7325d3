/**
 * SendMessagePair throughput into one server process from concurrent clients.
 * Prints one JSON line with pairs/s, answer latency, the server's CPU and peak memory, for each
 * durability level (SQLite WAL + synchronous FULL, the default, and NORMAL).
 *
 * Env: BENCH_CLIENTS (20), BENCH_PAIRS (pairs per client, 500), BENCH_WINDOW (requests in flight per
 * client, 1), BENCH_SYNC (full,normal).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { makeProfile, createIdentity } from '../src/client/identity.js';
import { ShineClient } from '../src/client/client.js';
import type { BuiltPair } from '../src/client/pairs.js';
import { textPair } from '../src/client/pairs.js';
import { startServerProcess } from '../test/helpers/server-process.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 500);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 1);
const LEVELS = (process.env.BENCH_SYNC ?? 'full,normal').split(',') as ('full' | 'normal')[];

async function run(sync: 'full' | 'normal'): Promise<Record<string, unknown>> {
  // The per-connection client rate limit (200/s) would cap a load generator, not the server.
  const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
  writeFileSync(configFile, JSON.stringify({ rateLimit: { perSecond: 1_000_000, burst: 1_000_000 } }));
  await using server = await startServerProcess({
    env: { SHINE_SQLITE_SYNC: sync, SHINE_LOG_LEVEL: 'warn', SHINE_CONFIG_FILE: configFile },
  });
  const senders = Array.from({ length: CLIENTS }, (_, i) => createIdentity(`alice${i}`));
  const recipients = Array.from({ length: CLIENTS }, (_, i) => createIdentity(`bob${i}`));
  // Signing and encryption are the clients' work: done before the clock starts, and before the clients
  // connect (a client busy for longer than two heartbeats would miss the server's pings and be dropped).
  const base = Date.now();
  const pairs: BuiltPair[][] = senders.map((s, i) =>
    Array.from({ length: PAIRS }, (_, k) =>
      textPair(
        s,
        { login: recipients[i]!.login, encKey: recipients[i]!.encPublicKey },
        `message ${k} from ${s.login}`,
        {
          timeMs: base + k,
        },
      ),
    ),
  );
  const clients: ShineClient[] = [];
  for (let i = 0; i < CLIENTS; i++) {
    const c = await ShineClient.connect(server.wsUrl, { WebSocket: WebSocket as never });
    await c.register(makeProfile(senders[i]!, ['local'], 1, Date.now()));
    await c.register(makeProfile(recipients[i]!, ['local'], 1, Date.now()));
    await c.login(senders[i]!, 'bench');
    clients.push(c);
  }
  const cpu0 = server.cpuMs();
  const latencies: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    clients.map(async (c, i) => {
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < PAIRS) {
          const p = pairs[i]![next++]!;
          const s = performance.now();
          await c.call('SendMessagePair', { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 });
          latencies.push(performance.now() - s);
        }
      };
      await Promise.all(Array.from({ length: WINDOW }, lane));
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpuMs = server.cpuMs() - cpu0;
  await Promise.all(clients.map((c) => c.close()));
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number =>
    Number(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]!.toFixed(2));
  const total = CLIENTS * PAIRS;
  return {
    durability: sync === 'full' ? 'WAL+synchronous=FULL' : 'WAL+synchronous=NORMAL',
    pairs: total,
    pairsPerSec: Math.round(total / seconds),
    latencyMsP50: pct(0.5),
    latencyMsP99: pct(0.99),
    serverCpuPercent: Math.round((cpuMs / (seconds * 1000)) * 100),
    serverPeakRssMiB: Math.round(server.peakRssKiB() / 1024),
  };
}

const results: Record<string, unknown> = {};
for (const level of LEVELS) results[level] = await run(level);
console.log(
  JSON.stringify({
    bench: 'send-pairs',
    date: new Date().toISOString(),
    machine: { cpu: os.cpus()[0]?.model, cores: os.cpus().length, node: process.version },
    clients: CLIENTS,
    window: WINDOW,
    recipient: 'local (same server)',
    results,
  }),
);
