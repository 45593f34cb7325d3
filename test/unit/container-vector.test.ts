import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fromHex, toBase64, toHex, utf8 } from '../../src/protocol/bytes.js';
import { decodeContainer, encodeSigned, messageKeyOf, verifyContainer } from '../../src/protocol/container.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import { VECTOR_SEED } from '../helpers/codec.js';

const VECTOR_HEX = `
5348694e455f444d010105616c69636503626f620000019d345cf37b075bcd150000000000000000000000000000
000000000012636970686572746578742d666f722d626f620ce048e4036c10969647bb2e27c736c51d73dc2a829f
f55a6139d0121eb6b61c6f0e9e5dba942219d30e8e36f5aca7d52256664b8517d590647e88197cdef70e`;

const seed = VECTOR_SEED;

describe('docs/protocol.md §3 test vector', () => {
  it('derives the published public key from seed 1..32', () => {
    assert.equal(toBase64(ed25519PublicKey(seed)), 'ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=');
  });

  it('encodes byte for byte', () => {
    const c = encodeSigned(
      {
        messageType: 1,
        fromLogin: 'alice',
        toLogin: 'bob',
        timeMs: 1774700000123,
        nonce: 123456789,
        revisionTimeMs: 0,
        reencryptedAtMs: 0,
        body: utf8('ciphertext-for-bob'),
      },
      seed,
    );
    assert.equal(c.bytes.length, 134);
    assert.equal(toHex(c.bytes), VECTOR_HEX.replace(/\s+/g, ''));
    assert.equal(messageKeyOf(c), 'alice|bob|1774700000123|123456789|1');
  });

  it('decodes and verifies', () => {
    const c = decodeContainer(fromHex(VECTOR_HEX));
    assert.equal(c.fromLogin, 'alice');
    assert.equal(c.toLogin, 'bob');
    assert.equal(c.timeMs, 1774700000123);
    assert.equal(c.nonce, 123456789);
    assert.ok(verifyContainer(c, ed25519PublicKey(seed)));
  });
});
