/** The verify pool (worker threads) answers exactly as the inline verifier, job by job, in order. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { utf8 } from '../../src/protocol/bytes.js';
import { ed25519PublicKey, signEd25519 } from '../../src/protocol/ed25519.js';
import type { VerifyJob } from '../../src/server/crypto/verify-pool.js';
import { VerifyPool, bulkVerifier, inlineBulkVerifier } from '../../src/server/crypto/verify-pool.js';

const seed = Uint8Array.from({ length: 32 }, (_, i) => i + 7);
const publicKey = ed25519PublicKey(seed);

/** n jobs: every third one tampered with, every seventh malformed (a short signature or a long key). */
function jobs(n: number): { jobs: VerifyJob[]; expected: boolean[] } {
  const out: VerifyJob[] = [];
  const expected: boolean[] = [];
  for (let i = 0; i < n; i++) {
    const message = utf8(`message ${i} ${'x'.repeat(i % 300)}`);
    const signature = signEd25519(message, seed);
    if (i % 7 === 0) {
      out.push(
        i % 2
          ? { signature: signature.subarray(0, 63), message, publicKey }
          : { signature, message, publicKey: new Uint8Array(33) },
      );
      expected.push(false);
    } else if (i % 3 === 0) {
      const bad = signature.slice();
      bad[5]! ^= 1;
      out.push({ signature: bad, message, publicKey });
      expected.push(false);
    } else {
      out.push({ signature, message, publicKey });
      expected.push(true);
    }
  }
  return { jobs: out, expected };
}

describe('verify pool', () => {
  it('answers each job as the inline verifier does, in order, whether split over threads or not', async () => {
    const pool = new VerifyPool(3);
    try {
      for (const n of [0, 1, 5, 31, 200, 1000]) {
        const { jobs: js, expected } = jobs(n);
        assert.deepEqual(await inlineBulkVerifier().verifyMany(js), expected, `inline, ${n} jobs`);
        assert.deepEqual(await pool.verifyMany(js), expected, `pool, ${n} jobs`);
      }
      // Calls in flight together get their own answers.
      const a = jobs(300);
      const b = jobs(77);
      const [ra, rb] = await Promise.all([pool.verifyMany(a.jobs), pool.verifyMany(b.jobs)]);
      assert.deepEqual(ra, a.expected);
      assert.deepEqual(rb, b.expected);
    } finally {
      await pool.close();
    }
  });

  it('a closed pool refuses work; zero threads means inline checks', async () => {
    const pool = new VerifyPool(1);
    await pool.close();
    await assert.rejects(pool.verifyMany(jobs(3).jobs), /closed/);
    const inline = bulkVerifier(0);
    assert.ok(!(inline instanceof VerifyPool));
    assert.deepEqual(await inline.verifyMany(jobs(10).jobs), jobs(10).expected);
  });
});
