/**
 * Ed25519 and container verification throughput. Prints one JSON line.
 * Usage: npx tsx bench/verify.ts [--ms=2000]   (time spent on each measurement, in 4 interleaved rounds)
 */
import { machine } from './lib/machine.js';
import { fromHex } from '../src/protocol/bytes.js';
import { decodeContainer, encodeSigned, verifyContainer } from '../src/protocol/container.js';
import type { SignatureVerifier } from '../src/protocol/ed25519.js';
import { ed25519PublicKey, nobleVerifier } from '../src/protocol/ed25519.js';
import { nodeCryptoVerifier, sodiumVerifier } from '../src/server/crypto/verifier.js';

const msArg = process.argv.find((a) => a.startsWith('--ms='));
const MEASURE_MS = msArg ? Number(msArg.slice(5)) : 2000;
const WARMUP_MS = Math.min(200, MEASURE_MS / 10);

// docs/protocol.md §3 test vector: 134 bytes, 70 of them signed.
const VECTOR = fromHex(
  '5348694e455f444d010105616c69636503626f620000019d345cf37b075bcd150000000000000000000000000000' +
    '000000000012636970686572746578742d666f722d626f620ce048e4036c10969647bb2e27c736c51d73dc2a829f' +
    'f55a6139d0121eb6b61c6f0e9e5dba942219d30e8e36f5aca7d52256664b8517d590647e88197cdef70e',
);
const seed = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
const publicKey = ed25519PublicKey(seed);
const vector = decodeContainer(VECTOR);
const signedPart = VECTOR.subarray(0, vector.signedLength);
const big = encodeSigned(
  {
    messageType: 1,
    fromLogin: 'alice',
    toLogin: 'bob',
    timeMs: 1774700000123,
    nonce: 123456789,
    revisionTimeMs: 0,
    reencryptedAtMs: 0,
    body: new Uint8Array(1024).fill(0x5a),
  },
  seed,
).bytes;

/** Runs op in batches until `ms` have passed; returns operations per second. op must return true. */
function rate(op: () => boolean, ms: number): number {
  let count = 0;
  let batch = 16;
  const start = performance.now();
  let elapsed = 0;
  while (elapsed < ms) {
    for (let i = 0; i < batch; i++) if (!op()) throw new Error('verification failed during the benchmark');
    count += batch;
    elapsed = performance.now() - start;
    if (elapsed < ms / 20) batch *= 2;
  }
  return count / (elapsed / 1000);
}

const raw = (v: SignatureVerifier) => () => v.verify(vector.signature, signedPart, publicKey);
const container = (bytes: Uint8Array) => () => verifyContainer(decodeContainer(bytes), publicKey, sodiumVerifier);

const ops = {
  rawSodium: raw(sodiumVerifier),
  rawNode: raw(nodeCryptoVerifier),
  rawNoble: raw(nobleVerifier),
  container134: container(VECTOR),
  container1k: container(big),
};
type OpName = keyof typeof ops;

// The measurements take turns in short rounds and each keeps its best round, so a burst of load from
// other processes on a shared machine skews neither one figure nor the ratios between them.
const ROUNDS = 4;
const best = {} as Record<OpName, number>;
for (const [name, op] of Object.entries(ops) as [OpName, () => boolean][]) {
  rate(op, WARMUP_MS);
  best[name] = 0;
}
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, op] of Object.entries(ops) as [OpName, () => boolean][]) {
    best[name] = Math.max(best[name], rate(op, MEASURE_MS / ROUNDS));
  }
}
const perSec = (name: OpName): number => Math.round(best[name]);
const ratio = (name: OpName): number => Number((best[name] / best.rawSodium).toFixed(3));

console.log(
  JSON.stringify({
    bench: 'verify',
    unit: 'verifications/s',
    signedMessageBytes: signedPart.length,
    raw: { sodium: perSec('rawSodium'), node: perSec('rawNode'), noble: perSec('rawNoble') },
    // decodeContainer + verifyContainer with sodiumVerifier, keyed by container size in bytes
    container: {
      verifier: 'sodium',
      [`bytes${VECTOR.length}`]: perSec('container134'),
      [`bytes${big.length}`]: perSec('container1k'),
    },
    containerToRaw: { [`bytes${VECTOR.length}`]: ratio('container134'), [`bytes${big.length}`]: ratio('container1k') },
    measureMs: MEASURE_MS,
    method: `best of ${ROUNDS} interleaved rounds`,
    machine: machine(),
    date: new Date().toISOString(),
  }),
);
