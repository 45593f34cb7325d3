/** The SDK's chain helpers (src/client/chain.ts): building the next block and walking a list of blocks. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Block } from '../../src/client/index.js';
import type { ChainItem } from '../../src/client/index.js';
import {
  ShineClientError,
  buildNextBlock,
  checkChainItems,
  createIdentity,
  describeChainProblem,
  walkChain,
} from '../../src/client/index.js';
import { ZERO_HASH, blockDigest, blockHash, decodeBlock, encodeSignedBlock } from '../../src/protocol/block.js';
import { bytesEqual, fromBase64, toBase64, toHex, utf8 } from '../../src/protocol/bytes.js';
import { ContainerError } from '../../src/protocol/container.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { VECTOR_SEED } from '../helpers/codec.js';

const alice = createIdentity('alice');
const bob = createIdentity('bob');

/** A chain of n blocks by alice, one minute apart from the §14.1 vector's time. */
function chainOf(n: number): Block[] {
  const blocks: Block[] = [];
  for (let i = 0; i < n; i++) {
    const head = blocks.at(-1) ?? null;
    blocks.push(
      buildNextBlock(alice, head, { kind: 1 + i, body: utf8(`block ${i}`), timeMs: 1774700000123 + i * 60_000 }).block,
    );
  }
  return blocks;
}

describe('buildNextBlock', () => {
  it('reproduces both §14.1 test vectors from the §3 key', () => {
    const signer = { login: 'alice', signSeed: VECTOR_SEED };
    const genesis = buildNextBlock(signer, null, { kind: 1, body: utf8('genesis of alice'), timeMs: 1774700000123 });
    assert.equal(genesis.blockHash, '16f771f0edffd751be6949e030cddbca1f450b44606dda90ccf941ba977c0303');
    const second = buildNextBlock(signer, genesis.block, {
      kind: 2,
      body: utf8('second block'),
      timeMs: 1774700060000,
    });
    assert.equal(second.blockHash, 'abb549c68845bd84b55d511c9f01986b6fe9b3f1f91d03e56b4cb3a1850b7d07');
    assert.ok(bytesEqual(fromBase64(second.blockB64)!, second.block.bytes));
  });

  it('starts at index 0 with a zero prevHash, then links each block to the one before', () => {
    const [g, b1, b2] = chainOf(3) as [Block, Block, Block];
    assert.deepEqual([g.index, b1.index, b2.index], [0, 1, 2]);
    assert.ok(bytesEqual(g.prevHash, ZERO_HASH));
    assert.equal(toHex(b1.prevHash), blockHash(g));
    assert.equal(toHex(b2.prevHash), blockHash(b1));
    assert.equal(b2.login, 'alice');
  });

  it('defaults timeMs to now, but never before the head', () => {
    const before = Date.now();
    const genesis = buildNextBlock(alice, null, { kind: 1, body: new Uint8Array(0) }).block;
    assert.ok(genesis.timeMs >= before && genesis.timeMs <= Date.now());
    const future = buildNextBlock(alice, genesis, { kind: 1, body: new Uint8Array(0), timeMs: before + 86_400_000 });
    const next = buildNextBlock(alice, future.block, { kind: 1, body: new Uint8Array(0) });
    assert.equal(next.block.timeMs, future.block.timeMs);
  });

  it('refuses a head of another login, an explicit time before the head, and fields the codec refuses', () => {
    const head = chainOf(1)[0]!;
    assert.throws(() => buildNextBlock(bob, head, { kind: 1, body: new Uint8Array(0) }), /LOGIN/);
    assert.throws(
      () => buildNextBlock(alice, head, { kind: 1, body: new Uint8Array(0), timeMs: head.timeMs - 1 }),
      /TIME/,
    );
    assert.throws(
      () => buildNextBlock(alice, head, { kind: 0, body: new Uint8Array(0) }),
      (e: unknown) => e instanceof ContainerError && e.reason === 'BAD_KIND',
    );
  });
});

describe('walkChain', () => {
  const key = alice.signPublicKey;

  it('accepts a whole chain as blocks, bytes or base64, and returns its head', () => {
    const blocks = chainOf(4);
    for (const list of [blocks, blocks.map((b) => b.bytes), blocks.map((b) => toBase64(b.bytes))]) {
      const walk = walkChain(list, key);
      assert.equal(walk.problem, null);
      assert.equal(walk.head && blockHash(walk.head), blockHash(blocks[3]!));
    }
    assert.deepEqual(walkChain([], key), { head: null, problem: null });
    assert.equal(walkChain(blocks, key, { verifier: sodiumVerifier, login: 'alice' }).problem, null);
  });

  it('continues after a known head', () => {
    const blocks = chainOf(4);
    const walk = walkChain(blocks.slice(2), key, { after: blocks[1]! });
    assert.equal(walk.problem, null);
    assert.equal(walk.head?.index, 3);
    assert.deepEqual(walkChain(blocks.slice(3), key, { after: blocks[1]! }).problem, { position: 0, reason: 'INDEX' });
  });

  it('stops at the first problem, with its position and the last good head', () => {
    const blocks = chainOf(4);
    const at2 = (b: Block | Uint8Array | string): (Block | Uint8Array | string)[] => [
      blocks[0]!,
      blocks[1]!,
      b,
      blocks[3]!,
    ];
    const tampered = blocks[2]!.bytes.slice();
    const last = tampered.length - 65; // the body's last byte: the block still decodes, but no longer verifies
    tampered[last] = tampered[last]! ^ 1;
    const cut = blocks[2]!.bytes.subarray(0, 40);
    const resigned = encodeSignedBlock({ ...blocks[2]!, body: utf8('rewritten') }, alice.signSeed);
    const byBob = encodeSignedBlock({ ...blocks[2]! }, bob.signSeed);
    const early = encodeSignedBlock({ ...blocks[2]!, timeMs: blocks[1]!.timeMs - 1 }, alice.signSeed);
    const cases: [Block | Uint8Array | string, string, string | undefined][] = [
      [tampered, 'BAD_SIGNATURE', undefined],
      [byBob, 'BAD_SIGNATURE', undefined],
      [cut, 'BAD_BLOCK', 'TRUNCATED'],
      ['not base64!', 'BAD_BLOCK', 'not base64'],
      [blocks[1]!, 'INDEX', undefined],
      [early, 'TIME', undefined],
    ];
    for (const [item, reason, detail] of cases) {
      const walk = walkChain(at2(item), key);
      assert.deepEqual(walk.problem, detail === undefined ? { position: 2, reason } : { position: 2, reason, detail });
      assert.equal(walk.head?.index, 1, reason);
    }
    // A re-signed block 2 is fine by itself; block 3 then no longer links to it.
    assert.deepEqual(walkChain(at2(resigned), key).problem, { position: 3, reason: 'PREV_HASH' });
  });

  it('a genesis block with a non-zero prevHash, and a chain of another login when the owner is given', () => {
    const fake = encodeSignedBlock(
      { login: 'alice', index: 0, prevHash: blockDigest(chainOf(1)[0]!), timeMs: 1, kind: 1, body: new Uint8Array(0) },
      alice.signSeed,
    );
    assert.deepEqual(walkChain([fake], key).problem, { position: 0, reason: 'PREV_HASH' });
    const bobs = buildNextBlock(bob, null, { kind: 1, body: new Uint8Array(0) }).block;
    assert.deepEqual(walkChain([bobs], bob.signPublicKey, { login: 'alice' }).problem, {
      position: 0,
      reason: 'LOGIN',
    });
    assert.equal(walkChain([decodeBlock(bobs.bytes)], ed25519PublicKey(bob.signSeed)).problem, null);
  });
});

describe('checkChainItems (GetChain pages)', () => {
  const key = alice.signPublicKey;
  const itemOf = (b: Block): ChainItem => ({ index: b.index, blockHash: blockHash(b), blockB64: toBase64(b.bytes) });

  it('accepts a page from genesis and a page after a verified head', () => {
    const blocks = chainOf(5);
    const all = checkChainItems(blocks.map(itemOf), key, 'alice', null);
    assert.equal(all.problem, null);
    assert.deepEqual(
      all.blocks.map((b) => blockHash(b)),
      blocks.map((b) => blockHash(b)),
    );
    const tail = checkChainItems(blocks.slice(3).map(itemOf), key, 'alice', blocks[2]!);
    assert.deepEqual([tail.problem, tail.blocks.length], [null, 2]);
    // `any`: a head fetched alone, by its index.
    assert.equal(checkChainItems([itemOf(blocks[4]!)], key, 'alice', 'any').problem, null);
    assert.deepEqual(checkChainItems([itemOf(blocks[4]!)], key, 'alice', null).problem, { index: 4, reason: 'INDEX' });
  });

  it('reports the first bad item by its index, keeping the blocks before it', () => {
    const blocks = chainOf(4);
    const items = blocks.map(itemOf);
    const check = (at: number, item: ChainItem, login = 'alice', publicKey = key) => {
      const list = items.slice();
      list[at] = item;
      return checkChainItems(list, publicKey, login, null);
    };
    const byBob = encodeSignedBlock({ ...blocks[2]! }, bob.signSeed);
    assert.deepEqual(check(2, itemOf(byBob)).problem, { index: 2, reason: 'BAD_SIGNATURE' });
    assert.equal(check(2, itemOf(byBob)).blocks.length, 2);
    assert.deepEqual(check(2, { ...items[2]!, blockHash: blockHash(blocks[1]!) }).problem, {
      index: 2,
      reason: 'ITEM_MISMATCH',
    });
    assert.deepEqual(check(2, { ...items[2]!, index: 7 }).problem, { index: 7, reason: 'ITEM_MISMATCH' });
    assert.deepEqual(check(1, { ...items[1]!, blockB64: '%%' }).problem, {
      index: 1,
      reason: 'BAD_BLOCK',
      detail: 'not base64',
    });
    assert.deepEqual(check(0, items[0]!, 'bob').problem, { index: 0, reason: 'LOGIN' });
    assert.deepEqual(check(3, items[1]!).problem, { index: 1, reason: 'INDEX' });
  });

  it('says what a problem means in one sentence', () => {
    assert.equal(
      describeChainProblem({ index: 5, reason: 'BAD_SIGNATURE' }),
      "block 5 is not signed by the owner's key",
    );
    assert.equal(
      describeChainProblem({ index: 0, reason: 'BAD_BLOCK', detail: 'TRUNCATED' }),
      'block 0 does not decode as a SHiNE_BCH block (TRUNCATED)',
    );
    assert.match(describeChainProblem({ index: 9, reason: 'SHORT' }), /^block 9 is missing/);
  });

  it('a CHAIN_CONFLICT error keeps the head the server named', () => {
    const err = new ShineClientError('CHAIN_CONFLICT', 409, 'moved', 'AddBlock', { headIndex: 3, headHash: 'ab' });
    assert.deepEqual(err.details, { headIndex: 3, headHash: 'ab' });
    assert.deepEqual(new ShineClientError('TIMEOUT', 0, 'late').details, {});
  });
});
