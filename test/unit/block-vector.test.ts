/** The two SHiNE_BCH v1 test vectors (docs/protocol.md §14.1), reproduced byte for byte with the §3 key. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ZERO_HASH,
  blockDigest,
  blockHash,
  chainProblem,
  decodeBlock,
  encodeSignedBlock,
  verifyBlock,
} from '../../src/protocol/block.js';
import { fromHex, fromUtf8, toHex, utf8 } from '../../src/protocol/bytes.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import { VECTOR_SEED } from '../helpers/codec.js';

const GENESIS_HEX = `
5348694e455f4243480105616c6963650000000000000000000000000000000000000000000000000000000000
00000000000000000000000000019d345cf37b00010000001067656e65736973206f6620616c696365043d3ddd
a1fcbf1909a328b67d01b22bcbeacda51593b80dfda0f1913dcb42e359d92c9cf942cb1aaadb87f6821d596ca3
5a0666e812d56a6649cd157c2b7607`;
const GENESIS_HASH = '16f771f0edffd751be6949e030cddbca1f450b44606dda90ccf941ba977c0303';

const SECOND_HEX = `
5348694e455f4243480105616c696365000000000000000116f771f0edffd751be6949e030cddbca1f450b4460
6dda90ccf941ba977c03030000019d345ddd6000020000000c7365636f6e6420626c6f636b00b54bdeca3f7400
5795180b54c71070e170369c32ef4c62eb89075fba1b01733da672dc8254ace3aa8d8cce480b689cfbb22bc837
8cf76873e3b2cbf408b406`;
const SECOND_HASH = 'abb549c68845bd84b55d511c9f01986b6fe9b3f1f91d03e56b4cb3a1850b7d07';

const seed = VECTOR_SEED;
const publicKey = ed25519PublicKey(seed);

describe('docs/protocol.md §14.1 test vectors', () => {
  it('encodes the genesis block byte for byte, with its blockHash', () => {
    const b = encodeSignedBlock(
      { login: 'alice', index: 0, prevHash: ZERO_HASH, timeMs: 1774700000123, kind: 1, body: utf8('genesis of alice') },
      seed,
    );
    assert.equal(b.bytes.length, 150);
    assert.equal(b.signedLength, 86);
    assert.equal(toHex(b.bytes), GENESIS_HEX.replace(/\s+/g, ''));
    assert.equal(blockHash(b), GENESIS_HASH);
  });

  it('encodes its successor byte for byte, linked by the genesis hash', () => {
    const b = encodeSignedBlock(
      {
        login: 'alice',
        index: 1,
        prevHash: fromHex(GENESIS_HASH),
        timeMs: 1774700060000,
        kind: 2,
        body: utf8('second block'),
      },
      seed,
    );
    assert.equal(b.bytes.length, 146);
    assert.equal(toHex(b.bytes), SECOND_HEX.replace(/\s+/g, ''));
    assert.equal(blockHash(b), SECOND_HASH);
  });

  it('decodes and verifies both, and they form a chain', () => {
    const genesis = decodeBlock(fromHex(GENESIS_HEX));
    const second = decodeBlock(fromHex(SECOND_HEX));
    assert.deepEqual(
      [genesis.login, genesis.index, genesis.timeMs, genesis.kind, fromUtf8(genesis.body)],
      ['alice', 0, 1774700000123, 1, 'genesis of alice'],
    );
    assert.deepEqual(
      [second.login, second.index, second.timeMs, second.kind, fromUtf8(second.body)],
      ['alice', 1, 1774700060000, 2, 'second block'],
    );
    assert.equal(toHex(second.prevHash), GENESIS_HASH);
    assert.equal(toHex(blockDigest(genesis)), GENESIS_HASH);
    assert.ok(verifyBlock(genesis, publicKey));
    assert.ok(verifyBlock(second, publicKey));
    assert.equal(chainProblem(null, genesis), null);
    assert.equal(chainProblem(genesis, second), null);
    assert.equal(chainProblem(null, second), 'INDEX');
  });
});
