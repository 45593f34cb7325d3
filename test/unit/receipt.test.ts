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
import { keyFromSeed } from '../../src/server/keys.js';

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
