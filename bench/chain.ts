/**
 * User chains (docs/protocol.md §14): three `shine serve` processes on loopback, each the chain partner of the other
 * two. N clients on A each append M blocks to their own chain with AddBlock, one block at a time. Prints one JSON
 * line: blocks/s appended on A (answered = committed with A's durability), blocks/s mirrored to both partners (from
 * the first AddBlock until B and C hold every block), and, measured in the same run, the raw Ed25519 verify rate of
 * one block with the server's verifier (bench/verify.ts measures it in depth). Durability: SQLite WAL +
 * synchronous=FULL on every server (BENCH_SYNC=normal for NORMAL).
 *
 * BENCH_BACKFILL=1 stops C before the appends and starts it again once B holds every block: C then pulls every chain
 * from its partners by backfill (§14.3: GetChainHeads, then GetChain per chain), in the cycle POST /admin/sync runs.
 * `backfill` says how long from C's start (its process starting included) until it held every block, and how many
 * of them it pulled. BENCH_RTT_MS puts a relay in front of each server
 * (bench/lib/delay-link.ts) that holds every chunk half that long each way: the servers' calls to each other take that
 * round trip, as between data centres (the clients reach A directly).
 *
 * Env: BENCH_CLIENTS (20), BENCH_BLOCKS (blocks per client, 100), BENCH_SYNC (full), BENCH_BACKFILL (0),
 * BENCH_RTT_MS (0).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { machine } from './lib/machine.js';
import { UNLIMITED_RATE } from './lib/send-load.js';
import { sodiumVerifier } from '../src/server/crypto/verifier.js';
import { fromBase64 } from '../src/protocol/bytes.js';
import { metricSum } from '../test/helpers/metrics.js';
import { makeBlocks } from '../test/helpers/chains.js';
import { ADMIN_TOKEN, startFederatedProcesses } from '../test/helpers/federated-processes.js';
import type { ServerProcess } from '../test/helpers/server-process.js';
import { freePort } from '../test/helpers/server-process.js';
import { adminCall } from '../test/helpers/replication.js';
import { startDelayLink } from './lib/delay-link.js';
import { connectUser, makeUser } from '../test/helpers/users.js';
import { waitUntil } from '../test/helpers/wait.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 100);
const SYNC = process.env.BENCH_SYNC === 'normal' ? 'normal' : 'full';
const TOTAL = CLIENTS * BLOCKS;
const BACKFILL = process.env.BENCH_BACKFILL === '1';
const RTT_MS = Number(process.env.BENCH_RTT_MS ?? 0);

const users = Array.from({ length: CLIENTS }, (_, i) => makeUser(`user${i}`, ['alpha']));
// Signed before any server starts: the clients only send.
const chains = users.map((u) => makeBlocks(u, BLOCKS));

const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
const logins = ['alpha', 'beta', 'gamma'];
const ports = await Promise.all(logins.map(() => freePort()));
const links = RTT_MS > 0 ? await Promise.all(ports.map((port) => startDelayLink(port, RTT_MS / 2))) : [];
const servers = (await startFederatedProcesses(
  logins.map((serverLogin, i) => ({
    serverLogin,
    port: ports[i]!,
    ...(links[i] ? { publicWsUrl: links[i].wsUrl } : {}),
    env: { SHINE_CHAIN_PARTNERS: logins.filter((l) => l !== serverLogin).join(',') },
  })),
  { SHINE_SQLITE_SYNC: SYNC, SHINE_CONFIG_FILE: configFile },
).catch(async (err: unknown) => {
  await Promise.all(links.map((l) => l[Symbol.asyncDispose]()));
  throw err;
})) as [ServerProcess, ServerProcess, ServerProcess];
const [a, b, c] = servers;
try {
  if (BACKFILL) await c.kill('SIGTERM');
  const sessions = await Promise.all(users.map((u) => connectUser(a.wsUrl, u, 'bench')));
  // Pushed (receive) or pulled by backfill (pull): a partner holds every block once their sum is the total.
  const received = (s: ServerProcess) => metricSum(s.httpUrl, 'shine_chain_blocks_stored_total');
  const t0 = performance.now();
  await Promise.all(
    sessions.map(async (session, i) => {
      for (const blk of chains[i]!) await session.call('AddBlock', { blockB64: blk.blockB64 });
    }),
  );
  const appendMs = performance.now() - t0;
  await waitUntil(
    async () => (await received(b)) >= TOTAL && (BACKFILL || (await received(c)) >= TOTAL),
    600_000,
    BACKFILL ? 'B holds every block' : 'both partners hold every block',
  );
  const mirrorMs = performance.now() - t0;
  // C comes back and pulls every chain (its start-up cycle; POST /admin/sync joins it, or runs one).
  let backfill: Record<string, unknown> | null = null;
  if (BACKFILL) {
    const b0 = performance.now();
    await c.restart();
    const startMs = performance.now() - b0;
    const cycle = await adminCall(c.httpUrl, 'POST', '/admin/sync', ADMIN_TOKEN);
    await waitUntil(async () => (await received(c)) >= TOTAL, 600_000, 'C holds every block');
    const ms = performance.now() - b0;
    backfill = {
      /** From C's start (its process starting included) until it held every block. */
      seconds: Number((ms / 1000).toFixed(2)),
      /** C's process start, until it answered its health check (its start-up cycle may begin before). */
      startSeconds: Number((startMs / 1000).toFixed(2)),
      /** Blocks C stored by its backfill; the rest came by A's and B's pushes, retried once C was back. */
      pulled: await metricSum(c.httpUrl, 'shine_chain_blocks_stored_total', { via: 'pull' }),
      cycle,
    };
  }
  await Promise.all(sessions.map((s) => s.close()));

  // The server's verifier on one block, for about a second.
  const block = chains[0]![0]!.block;
  const key = fromBase64(users[0]!.signKeyB64)!;
  const signed = block.bytes.subarray(0, block.signedLength);
  let verified = 0;
  const v0 = performance.now();
  while (performance.now() - v0 < 1000) {
    for (let i = 0; i < 256; i++) if (sodiumVerifier.verify(block.signature, signed, key)) verified++;
  }
  const verifyPerSec = Math.round(verified / ((performance.now() - v0) / 1000));

  console.log(
    JSON.stringify({
      bench: 'chain',
      date: new Date().toISOString(),
      machine: machine(),
      durability: `SQLite WAL + synchronous=${SYNC.toUpperCase()} on every server`,
      setup: `A, B, C separate \`shine serve\` processes on loopback${RTT_MS > 0 ? `, calling each other over a ${RTT_MS} ms round trip` : ''}, each the chain partner of the other two; ${CLIENTS} clients on A, each appending ${BLOCKS} blocks (${block.bytes.length} bytes) to its own chain one at a time; clients and servers share the cores${BACKFILL ? '; C stopped during the appends, then started and caught up by backfill' : ''}`,
      linkRttMs: RTT_MS,
      blocks: TOTAL,
      appendBlocksPerSec: Math.round(TOTAL / (appendMs / 1000)),
      mirroredBlocksPerSec: Math.round(TOTAL / (mirrorMs / 1000)),
      appendSeconds: Number((appendMs / 1000).toFixed(2)),
      mirroredSeconds: Number((mirrorMs / 1000).toFixed(2)),
      ...(backfill ? { backfill } : {}),
      rawVerifyPerSec: { sodium: verifyPerSec },
    }),
  );
} finally {
  await Promise.all(servers.map((s) => s.close()));
  await Promise.all(links.map((l) => l[Symbol.asyncDispose]()));
}
