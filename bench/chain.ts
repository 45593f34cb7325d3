/**
 * User chains (docs/protocol.md §14): three `shine serve` processes on loopback, each the chain partner of the other
 * two. N clients on A each append M blocks to their own chain with AddBlock, one block at a time. Prints one JSON
 * line: blocks/s appended on A (answered = committed with A's durability), blocks/s mirrored to both partners (from
 * the first AddBlock until B and C hold every block), and, measured in the same run, the raw Ed25519 verify rate of
 * one block with the server's verifier (bench/verify.ts measures it in depth). Durability: SQLite WAL +
 * synchronous=FULL on every server (BENCH_SYNC=normal for NORMAL).
 *
 * Env: BENCH_CLIENTS (20), BENCH_BLOCKS (blocks per client, 100), BENCH_SYNC (full).
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
import { startFederatedProcesses } from '../test/helpers/federated-processes.js';
import type { ServerProcess } from '../test/helpers/server-process.js';
import { connectUser, makeUser } from '../test/helpers/users.js';
import { waitUntil } from '../test/helpers/wait.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 100);
const SYNC = process.env.BENCH_SYNC === 'normal' ? 'normal' : 'full';
const TOTAL = CLIENTS * BLOCKS;

const users = Array.from({ length: CLIENTS }, (_, i) => makeUser(`user${i}`, ['alpha']));
// Signed before any server starts: the clients only send.
const chains = users.map((u) => makeBlocks(u, BLOCKS));

const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
const logins = ['alpha', 'beta', 'gamma'];
const servers = (await startFederatedProcesses(
  logins.map((serverLogin) => ({
    serverLogin,
    env: { SHINE_CHAIN_PARTNERS: logins.filter((l) => l !== serverLogin).join(',') },
  })),
  { SHINE_SQLITE_SYNC: SYNC, SHINE_CONFIG_FILE: configFile },
)) as [ServerProcess, ServerProcess, ServerProcess];
const [a, b, c] = servers;
try {
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
    async () => (await received(b)) >= TOTAL && (await received(c)) >= TOTAL,
    600_000,
    'both partners hold every block',
  );
  const mirrorMs = performance.now() - t0;
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
      setup: `A, B, C separate \`shine serve\` processes on loopback, each the chain partner of the other two; ${CLIENTS} clients on A, each appending ${BLOCKS} blocks (${block.bytes.length} bytes) to its own chain one at a time; clients and servers share the cores`,
      blocks: TOTAL,
      appendBlocksPerSec: Math.round(TOTAL / (appendMs / 1000)),
      mirroredBlocksPerSec: Math.round(TOTAL / (mirrorMs / 1000)),
      appendSeconds: Number((appendMs / 1000).toFixed(2)),
      mirroredSeconds: Number((mirrorMs / 1000).toFixed(2)),
      rawVerifyPerSec: { sodium: verifyPerSec },
    }),
  );
} finally {
  await Promise.all(servers.map((s) => s.close()));
}
