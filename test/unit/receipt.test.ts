import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { utf8 } from '../../src/protocol/bytes.js';
import {
  containerSha256B64,
  pickReceipt,
  receiptMismatch,
  receiptShapeProblem,
  receiptSigningText,
  signReceipt,
  verifyReceipt,
} from '../../src/protocol/receipt.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { inlineBulkVerifier } from '../../src/server/crypto/verify-pool.js';
import {
  checkReceipt,
  checkReceipts,
  containerSha256B64 as serverContainerSha256B64,
  expectationFor,
  receiptFor,
} from '../../src/server/delivery/receipts.js';
import { keyFromSeed } from '../../src/server/keys.js';
import type { ServerRecord } from '../../src/server/store/types.js';

const key = keyFromSeed(Uint8Array.from({ length: 32 }, (_, i) => i + 7));
const other = keyFromSeed(Uint8Array.from({ length: 32 }, (_, i) => i + 9));
const unsigned = {
  serverLogin: 'srv-b1',
  messageKey: 'alice|bob|1700000000000|7|1',
  revisionTimeMs: 1700000000000,
  reencryptedAtMs: 0,
  storedAtMs: 1700000000123,
  containerSha256B64: containerSha256B64(utf8('container bytes')),
};

describe('delivery receipts', () => {
  it('signs the SHiNE-DELIVERY-v1 text and verifies only against the signer', () => {
    assert.equal(
      receiptSigningText(unsigned),
      'SHiNE-DELIVERY-v1\nserver=srv-b1\nkey=alice|bob|1700000000000|7|1\nrevision=1700000000000:0\n' +
        `stored=1700000000123\nsha256=${unsigned.containerSha256B64}`,
    );
    const r = signReceipt(unsigned, key.sign);
    assert.equal(receiptShapeProblem(r), null);
    assert.equal(verifyReceipt(r, key.publicKeyB64), true);
    assert.equal(verifyReceipt(r, other.publicKeyB64), false);
    assert.equal(verifyReceipt({ ...r, storedAtMs: r.storedAtMs + 1 }, key.publicKeyB64), false);
  });

  it('names the first mismatch with the copy', () => {
    const r = signReceipt(unsigned, key.sign);
    const want = { ...unsigned, serverLogins: ['srv-b1', 'srv-b2'] };
    assert.equal(receiptMismatch(r, want), null);
    assert.equal(receiptMismatch(r, { ...want, serverLogins: ['srv-b2'] }), 'SERVER');
    assert.equal(receiptMismatch(r, { ...want, messageKey: 'alice|bob|1700000000000|8|1' }), 'KEY');
    assert.equal(receiptMismatch(r, { ...want, reencryptedAtMs: 5 }), 'REVISION');
    assert.equal(receiptMismatch(r, { ...want, containerSha256B64: containerSha256B64(utf8('other')) }), 'SHA256');
  });

  it('refuses malformed receipts and drops extra fields', () => {
    const r = signReceipt(unsigned, key.sign);
    assert.match(receiptShapeProblem(null) ?? '', /object/);
    assert.match(receiptShapeProblem({ ...r, serverLogin: 'Bad Login' }) ?? '', /serverLogin/);
    assert.match(receiptShapeProblem({ ...r, storedAtMs: -1 }) ?? '', /storedAtMs/);
    assert.match(receiptShapeProblem({ ...r, containerSha256B64: 'AAAA' }) ?? '', /containerSha256B64/);
    assert.match(receiptShapeProblem({ ...r, signatureB64: 'AAAA' }) ?? '', /signatureB64/);
    assert.deepEqual(pickReceipt({ ...r, extra: 1 } as typeof r), r);
  });
});

describe('checking a receipt on the server (src/server/delivery/receipts.ts)', () => {
  // The pinned descriptors the check reads: srv-b1's key, and nothing for any other server.
  const directory = {
    lookupServer: async (serverLogin: string): Promise<ServerRecord | null> =>
      serverLogin === 'srv-b1'
        ? {
            descriptor: { serverLogin, wsUrl: 'ws://b1.invalid/ws', signKeyB64: key.publicKeyB64, signatureB64: '' },
            source: 'static',
          }
        : null,
  };
  const copy = {
    messageKey: unsigned.messageKey,
    revisionTimeMs: unsigned.revisionTimeMs,
    reencryptedAtMs: 0,
    bytes: utf8('container bytes'),
  };
  const mine = receiptFor('srv-b1', key.sign, { ...copy, storedAtMs: unsigned.storedAtMs });

  it("hashes containers with node:crypto exactly as the browser SDK's pure-JS hash does", () => {
    const big = Uint8Array.from({ length: 70_000 }, (_, i) => (i * 31) & 0xff);
    // Views into a larger buffer too: the hash must cover the view, not the whole ArrayBuffer.
    for (const bytes of [new Uint8Array(0), utf8('container bytes'), big, big.subarray(5, 64_005), big.subarray(1, 2)])
      assert.equal(serverContainerSha256B64(bytes), containerSha256B64(bytes));
  });

  it('receiptFor signs the copy as checkReceipt expects it', async () => {
    assert.deepEqual(mine, signReceipt(unsigned, key.sign));
    const want = expectationFor(copy, ['srv-b1']);
    assert.deepEqual(await checkReceipt(mine, want, { directory, verifier: sodiumVerifier }), {
      receipt: mine,
    });
    assert.deepEqual(await checkReceipt({ ...mine, extra: 1 }, want, { directory, verifier: sodiumVerifier }), {
      receipt: mine,
    });
  });

  it('says why a receipt does not prove the delivery, checking every signature in one bulk call', async () => {
    const want = expectationFor(copy, ['srv-b1', 'srv-b2']);
    const byOther = receiptFor('srv-b2', other.sign, { ...copy, storedAtMs: 1 });
    const forged = receiptFor('srv-b1', other.sign, { ...copy, storedAtMs: 1 });
    const items = [
      undefined,
      'a string',
      { ...mine, signatureB64: 'AAAA' },
      mine,
      { ...mine, messageKey: 'alice|bob|1700000000000|8|1' },
      receiptFor('srv-b1', key.sign, { ...copy, revisionTimeMs: 1, storedAtMs: 1 }),
      receiptFor('srv-b1', key.sign, { ...copy, bytes: utf8('other bytes'), storedAtMs: 1 }),
      byOther,
      forged,
    ].map((x) => ({ x, want }));
    let bulkCalls = 0;
    const bulk = inlineBulkVerifier(sodiumVerifier);
    const counting = {
      ...bulk,
      verifyMany: (jobs: Parameters<typeof bulk.verifyMany>[0]) => (bulkCalls++, bulk.verifyMany(jobs)),
    };
    const out = await checkReceipts(items, directory, counting);
    assert.deepEqual(
      out.map((o) => ('problem' in o ? o.problem : 'ok')),
      [
        'no receipt',
        'receipt must be an object',
        'signatureB64 must be 64 bytes of base64',
        'ok',
        'key mismatch',
        'revision mismatch',
        'sha256 mismatch',
        'signer srv-b2 unknown',
        'bad signature',
      ],
    );
    assert.equal(bulkCalls, 1);
    const onlyB2 = expectationFor(copy, ['srv-b2']);
    assert.deepEqual(await checkReceipt(mine, onlyB2, { directory, verifier: sodiumVerifier }), {
      problem: 'server mismatch',
    });
    // Without a list of servers, any pinned signer counts (decision 33).
    assert.ok(
      'receipt' in (await checkReceipt(mine, expectationFor(copy, undefined), { directory, verifier: sodiumVerifier })),
    );
  });
});
