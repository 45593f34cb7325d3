/**
 * SHiNE_BCH v1 codec (docs/protocol.md §14.1): every decode rejection from hex literals, the encoder's checks, the
 * chain check, and property tests (round trip, single-byte changes, truncation, arbitrary input).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Block, BlockFields, ChainProblem } from '../../src/protocol/block.js';
import {
  BLOCK_MAGIC,
  MAX_BLOCK,
  MAX_BLOCK_BODY,
  ZERO_HASH,
  blockDigest,
  blockHash,
  chainProblem,
  decodeBlock,
  encodeSignedBlock,
  encodeUnsignedBlock,
  verifyBlock,
} from '../../src/protocol/block.js';
import { bytesEqual, fromHex, toHex, utf8 } from '../../src/protocol/bytes.js';
import type { ContainerErrorReason } from '../../src/protocol/container.js';
import { ContainerError } from '../../src/protocol/container.js';
import type { SignatureVerifier } from '../../src/protocol/ed25519.js';
import { ed25519PublicKey, nobleVerifier } from '../../src/protocol/ed25519.js';
import { LOGIN_RE } from '../../src/protocol/login.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { VECTOR_SEED, codecReason, tryCodec, withByte } from '../helpers/codec.js';

// The genesis vector of docs/protocol.md §14.1, field by field (byte offsets on the right).
const MAGIC = '5348694e455f424348'; //               0..8   "SHiNE_BCH"
const V1 = '01'; //                                  9      formatVersion
const ALICE = '05616c696365'; //                     10..15 login "alice"
const INDEX0 = '0000000000000000'; //                16..23 index 0
const ZERO = '00'.repeat(32); //                     24..55 prevHash (zero)
const TIME = '0000019d345cf37b'; //                  56..63 timeMs 1774700000123
const KIND1 = '0001'; //                             64..65 kind 1
const LEN16 = '00000010'; //                         66..69 bodyLength 16
const BODY = '67656e65736973206f6620616c696365'; //  70..85 "genesis of alice"
const SIG =
  '043d3ddda1fcbf1909a328b67d01b22bcbeacda51593b80dfda0f1913dcb42e3' + // 86..149 signature
  '59d92c9cf942cb1aaadb87f6821d596ca35a0666e812d56a6649cd157c2b7607';
const VECTOR_HEX = MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + KIND1 + LEN16 + BODY + SIG;
const VECTOR = fromHex(VECTOR_HEX);
/** A placeholder signature: the decoder checks structure only. */
const NOSIG = '00'.repeat(64);

const seed = VECTOR_SEED;
const publicKey = ed25519PublicKey(seed);

const reasonOf = (input: Uint8Array): ContainerErrorReason | 'OK' => codecReason(() => decodeBlock(input));

function rejects(hex: string, reason: ContainerErrorReason): void {
  assert.equal(reasonOf(fromHex(hex)), reason);
}

const encodeFailure = (f: BlockFields): ContainerErrorReason | 'OK' => codecReason(() => encodeUnsignedBlock(f));

const genesisFields: BlockFields = {
  login: 'alice',
  index: 0,
  prevHash: ZERO_HASH,
  timeMs: 1774700000123,
  kind: 1,
  body: utf8('genesis of alice'),
};

describe('decodeBlock accepts', () => {
  it('the test vector assembled from its fields', () => {
    assert.equal(VECTOR.length, 150);
    const b = decodeBlock(VECTOR);
    assert.equal(b.signedLength, 86);
    assert.equal(toHex(b.body), BODY);
    assert.equal(toHex(b.signature), SIG);
    assert.ok(verifyBlock(b, publicKey));
  });

  it('u64 fields up to 2^53-1, kind 65 535, an empty body and any prevHash', () => {
    const b = decodeBlock(
      fromHex(
        MAGIC + V1 + ALICE + '001fffffffffffff' + 'ab'.repeat(32) + '001fffffffffffff' + 'ffff' + '00000000' + NOSIG,
      ),
    );
    assert.equal(b.index, Number.MAX_SAFE_INTEGER);
    assert.equal(b.timeMs, Number.MAX_SAFE_INTEGER);
    assert.equal(b.kind, 0xffff);
    assert.equal(b.body.length, 0);
    assert.equal(toHex(b.prevHash), 'ab'.repeat(32));
  });

  it('the largest block: a 32-character login and a 65 536-byte body, under the limit', () => {
    const b = encodeSignedBlock(
      { ...genesisFields, login: 'a'.repeat(32), body: new Uint8Array(MAX_BLOCK_BODY) },
      seed,
    );
    assert.equal(b.bytes.length, 129 + 32 + MAX_BLOCK_BODY);
    assert.ok(b.bytes.length <= MAX_BLOCK);
    assert.ok(verifyBlock(decodeBlock(b.bytes), publicKey));
  });
});

describe('decodeBlock rejects, one rule each', () => {
  it('more than 65 792 bytes, before parsing', () => {
    const big = new Uint8Array(MAX_BLOCK + 1);
    big.set(VECTOR);
    assert.equal(reasonOf(big), 'TOO_LARGE');
    assert.equal(reasonOf(new Uint8Array(MAX_BLOCK + 1)), 'TOO_LARGE');
  });

  it('a wrong magic (including the DM container magic)', () => {
    rejects('5348694e455f424349' + VECTOR_HEX.slice(18), 'BAD_MAGIC');
    rejects('7348694e455f424348' + VECTOR_HEX.slice(18), 'BAD_MAGIC');
    rejects('5348694e455f444d01' + VECTOR_HEX.slice(18), 'BAD_MAGIC');
    rejects('5348', 'TRUNCATED');
  });

  it('a format version other than 1', () => {
    for (const v of ['00', '02', 'ff']) rejects(MAGIC + v + VECTOR_HEX.slice(20), 'BAD_VERSION');
  });

  it('a bad login: syntax, non-ASCII, too short, too long, empty', () => {
    rejects(MAGIC + V1 + '05416c696365' + VECTOR_HEX.slice(32), 'BAD_LOGIN'); // "Alice"
    rejects(MAGIC + V1 + '05616ce96365' + VECTOR_HEX.slice(32), 'BAD_LOGIN'); // Latin-1 é
    rejects(MAGIC + V1 + '02616c' + VECTOR_HEX.slice(32), 'BAD_LOGIN');
    rejects(MAGIC + V1 + '21' + '61'.repeat(33) + VECTOR_HEX.slice(32), 'BAD_LOGIN');
    rejects(MAGIC + V1 + '00' + VECTOR_HEX.slice(32), 'BAD_LOGIN');
  });

  it('index or timeMs above 2^53-1', () => {
    rejects(MAGIC + V1 + ALICE + '0020000000000000' + ZERO + TIME + KIND1 + LEN16 + BODY + SIG, 'BAD_INTEGER');
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + 'ffffffffffffffff' + KIND1 + LEN16 + BODY + SIG, 'BAD_INTEGER');
  });

  it('kind 0', () => {
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + '0000' + LEN16 + BODY + SIG, 'BAD_KIND');
  });

  it('bodyLength above 65 536, before looking for the body', () => {
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + KIND1 + '00010001' + BODY + SIG, 'BODY_TOO_LARGE');
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + KIND1 + 'ffffffff', 'BODY_TOO_LARGE');
  });

  it('a field or the signature running past the end', () => {
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + KIND1 + '00000011' + BODY + SIG, 'TRUNCATED');
    rejects(MAGIC + V1 + ALICE + INDEX0 + ZERO + TIME + KIND1 + LEN16 + BODY + SIG.slice(2), 'TRUNCATED');
    rejects(MAGIC + V1 + '20616c696365', 'TRUNCATED');
  });

  it('bytes after the signature', () => {
    rejects(VECTOR_HEX + '00', 'TRAILING_BYTES');
  });

  it('input that is not a Uint8Array, with a ContainerError', () => {
    for (const v of [undefined, null, 'SHiNE_BCH', [0x53], new ArrayBuffer(150)]) {
      assert.throws(() => decodeBlock(v as unknown as Uint8Array), ContainerError);
    }
  });
});

describe('encodeUnsignedBlock rejects what the decoder would', () => {
  it('each bad field with its reason', () => {
    const cases: [Partial<BlockFields>, ContainerErrorReason][] = [
      [{ login: 'Alice' }, 'BAD_LOGIN'],
      [{ login: 'al' }, 'BAD_LOGIN'],
      [{ login: 'alicé' }, 'BAD_LOGIN'],
      [{ index: -1 }, 'BAD_INTEGER'],
      [{ index: 1.5 }, 'BAD_INTEGER'],
      [{ index: 2 ** 53 }, 'BAD_INTEGER'],
      [{ timeMs: Number.NaN }, 'BAD_INTEGER'],
      [{ timeMs: Infinity }, 'BAD_INTEGER'],
      [{ prevHash: new Uint8Array(31) }, 'BAD_HASH'],
      [{ prevHash: new Uint8Array(33) }, 'BAD_HASH'],
      [{ kind: 0 }, 'BAD_KIND'],
      [{ kind: 0x10000 }, 'BAD_KIND'],
      [{ kind: 1.5 }, 'BAD_KIND'],
      [{ body: new Uint8Array(MAX_BLOCK_BODY + 1) }, 'BODY_TOO_LARGE'],
    ];
    for (const [patch, reason] of cases) {
      assert.equal(encodeFailure({ ...genesisFields, ...patch }), reason, JSON.stringify(patch));
    }
    assert.equal(encodeFailure({ ...genesisFields, index: Number.MAX_SAFE_INTEGER, kind: 0xffff }), 'OK');
  });
});

describe('chainProblem', () => {
  const genesis = encodeSignedBlock(genesisFields, seed);
  const next: BlockFields = {
    login: 'alice',
    index: 1,
    prevHash: blockDigest(genesis),
    timeMs: genesis.timeMs,
    kind: 7,
    body: new Uint8Array(0),
  };

  it('accepts a genesis block after nothing, and a linked successor with an equal time', () => {
    assert.equal(chainProblem(null, genesis), null);
    assert.equal(chainProblem(genesis, next), null);
  });

  it('names each broken rule', () => {
    const cases: [Block | null, Partial<BlockFields>, ChainProblem][] = [
      [null, { ...genesisFields, index: 1 }, 'INDEX'],
      [null, { ...genesisFields, prevHash: blockDigest(genesis) }, 'PREV_HASH'],
      [genesis, { login: 'bob' }, 'LOGIN'],
      [genesis, { index: 0 }, 'INDEX'],
      [genesis, { index: 2 }, 'INDEX'],
      [genesis, { prevHash: ZERO_HASH }, 'PREV_HASH'],
      [genesis, { timeMs: genesis.timeMs - 1 }, 'TIME'],
      // The first failing rule decides: login, then index, then prevHash, then time.
      [genesis, { login: 'bob', index: 5, prevHash: ZERO_HASH, timeMs: 0 }, 'LOGIN'],
      [genesis, { index: 5, prevHash: ZERO_HASH, timeMs: 0 }, 'INDEX'],
      [genesis, { prevHash: ZERO_HASH, timeMs: 0 }, 'PREV_HASH'],
    ];
    for (const [prev, patch, problem] of cases) {
      const base = prev === null ? genesisFields : next;
      assert.equal(chainProblem(prev, { ...base, ...patch }), problem, JSON.stringify(patch));
    }
  });
});

// ---- properties ----

const login = fc.stringMatching(LOGIN_RE);
const u64 = fc.maxSafeNat();
const fieldsArb = (maxBody: number): fc.Arbitrary<BlockFields> =>
  fc.record({
    login,
    index: u64,
    prevHash: fc.uint8Array({ minLength: 32, maxLength: 32 }),
    timeMs: u64,
    kind: fc.integer({ min: 1, max: 0xffff }),
    body: fc.uint8Array({ maxLength: maxBody }),
  });
const signedArb = fc
  .tuple(fieldsArb(64), fc.uint8Array({ minLength: 32, maxLength: 32 }))
  .map(([fields, s]) => ({ b: encodeSignedBlock(fields, s), publicKey: ed25519PublicKey(s) }));

const tryDecode = (bytes: Uint8Array): Block | ContainerError => tryCodec(() => decodeBlock(bytes));

function accepted(bytes: Uint8Array, key: Uint8Array, verifier: SignatureVerifier): boolean {
  const b = tryDecode(bytes);
  return !(b instanceof ContainerError) && verifyBlock(b, key, verifier);
}

describe('properties', () => {
  it('encode → decode gives back every field; the signature verifies; blockHash is sha256 in lowercase hex', () => {
    const signer = Uint8Array.from({ length: 32 }, (_, i) => 255 - i);
    const key = ed25519PublicKey(signer);
    fc.assert(
      fc.property(fieldsArb(300), (fields) => {
        const b = encodeSignedBlock(fields, signer);
        const d = decodeBlock(b.bytes);
        assert.deepEqual(
          [d.login, d.index, d.timeMs, d.kind, d.signedLength],
          [fields.login, fields.index, fields.timeMs, fields.kind, b.signedLength],
        );
        assert.ok(bytesEqual(d.prevHash, fields.prevHash));
        assert.ok(bytesEqual(d.body, fields.body));
        assert.ok(bytesEqual(d.signature, b.signature));
        assert.equal(d.bytes.length, d.signedLength + 64);
        assert.ok(bytesEqual(encodeUnsignedBlock(d), d.bytes.subarray(0, d.signedLength)));
        assert.ok(verifyBlock(d, key, sodiumVerifier));
        assert.match(blockHash(d), /^[0-9a-f]{64}$/);
        assert.equal(blockHash(d), toHex(blockDigest(b)));
      }),
      { numRuns: 300 },
    );
  });

  it('the test vector: every other value at each of its 150 positions is rejected, and changes the hash', () => {
    assert.ok(accepted(VECTOR, publicKey, sodiumVerifier));
    const hash = blockHash({ bytes: VECTOR });
    let verified = 0;
    for (let at = 0; at < VECTOR.length; at++) {
      for (let v = 0; v < 256; v++) {
        if (v === VECTOR[at]) continue;
        const changed = withByte(VECTOR, at, v);
        assert.notEqual(blockHash({ bytes: changed }), hash);
        const b = tryDecode(changed);
        if (b instanceof ContainerError) continue;
        verified++;
        assert.equal(verifyBlock(b, publicKey, sodiumVerifier), false, `byte ${at}: ${VECTOR[at]} -> ${v}`);
      }
    }
    // prevHash, body and signature take any value, so those changes reached the signature check.
    assert.ok(verified >= (32 + 16 + 64) * 255, `only ${verified} changes reached verification`);
  });

  it('the test vector: bits 0 and 7 of each position are rejected by noble (the client verifier)', () => {
    for (let at = 0; at < VECTOR.length; at++) {
      for (const mask of [0x01, 0x80]) {
        assert.equal(accepted(withByte(VECTOR, at, VECTOR[at]! ^ mask), publicKey, nobleVerifier), false, `byte ${at}`);
      }
    }
  });

  it('the test vector: truncated at every length, or with any byte appended', () => {
    for (let n = 0; n < VECTOR.length; n++) {
      const r = tryDecode(VECTOR.subarray(0, n));
      assert.ok(r instanceof ContainerError && r.reason === 'TRUNCATED', `length ${n}`);
    }
    for (let v = 0; v < 256; v++) {
      const r = tryDecode(Uint8Array.from([...VECTOR, v]));
      assert.ok(r instanceof ContainerError && r.reason === 'TRAILING_BYTES', `appended ${v}`);
    }
  });

  it('random valid blocks: several values at every position, truncation, one more byte', () => {
    fc.assert(
      fc.property(signedArb, fc.integer({ min: 1, max: 255 }), fc.nat(255), ({ b, publicKey: key }, xor, extra) => {
        const bytes = b.bytes;
        assert.ok(accepted(bytes, key, sodiumVerifier));
        for (let at = 0; at < bytes.length; at++) {
          const old = bytes[at]!;
          for (const v of new Set([old ^ 0x01, old ^ 0x80, old ^ 0xff, old ^ xor])) {
            assert.equal(accepted(withByte(bytes, at, v), key, sodiumVerifier), false, `byte ${at}: ${old} -> ${v}`);
          }
        }
        for (let n = 0; n < bytes.length; n++) {
          const r = tryDecode(bytes.subarray(0, n));
          assert.ok(r instanceof ContainerError && r.reason === 'TRUNCATED', `length ${n}`);
        }
        const r = tryDecode(Uint8Array.from([...bytes, extra]));
        assert.ok(r instanceof ContainerError && r.reason === 'TRAILING_BYTES');
      }),
      { numRuns: 60 },
    );
  });

  it('arbitrary input throws only ContainerError, and a decoded block verifies to a boolean', () => {
    const key = fc.uint8Array({ minLength: 32, maxLength: 32 });
    const robust = (bytes: Uint8Array, k: Uint8Array): void => {
      const b = tryDecode(bytes);
      if (!(b instanceof ContainerError)) {
        assert.equal(typeof verifyBlock(b, k, sodiumVerifier), 'boolean');
        assert.equal(typeof verifyBlock(b, k, nobleVerifier), 'boolean');
      }
    };
    fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), key, robust), { numRuns: 2000 });
    const prefixed = fc
      .tuple(fc.integer({ min: 0, max: 40 }), fc.uint8Array({ maxLength: 300 }))
      .map(([n, rest]) => Uint8Array.from([...BLOCK_MAGIC, 1, n, ...rest]));
    fc.assert(fc.property(prefixed, key, robust), { numRuns: 2000 });
    const edited = fc
      .tuple(signedArb, fc.array(fc.tuple(fc.nat(), fc.nat(255)), { maxLength: 6 }), fc.integer({ min: -70, max: 70 }))
      .map(([{ b, publicKey: k }, edits, cut]) => {
        const out = b.bytes.slice();
        for (const [at, v] of edits) out[at % out.length] = v;
        const bytes =
          cut < 0 ? out.subarray(0, Math.max(0, out.length + cut)) : Uint8Array.from([...out, ...new Uint8Array(cut)]);
        return { bytes, k };
      });
    fc.assert(
      fc.property(edited, ({ bytes, k }) => robust(bytes, k)),
      { numRuns: 300 },
    );
  });

  it('a built chain links, and any other block in a position breaks the link', () => {
    fc.assert(
      fc.property(fc.array(fieldsArb(20), { minLength: 2, maxLength: 6 }), (raw) => {
        const chain: Block[] = [];
        let timeMs = 0;
        for (const [i, f] of raw.entries()) {
          timeMs += f.timeMs % 1000;
          const prev = chain.at(-1) ?? null;
          const prevHash = prev ? blockDigest(prev) : ZERO_HASH;
          chain.push(encodeSignedBlock({ ...f, login: raw[0]!.login, index: i, prevHash, timeMs }, seed));
          assert.equal(chainProblem(prev, chain[i]!), null);
        }
        // A block re-signed with any field changed no longer links to its successor.
        const at = raw.length - 2;
        const other = encodeSignedBlock({ ...chain[at]!, body: Uint8Array.from([...chain[at]!.body, 1]) }, seed);
        assert.equal(chainProblem(other, chain[at + 1]!), 'PREV_HASH');
      }),
      { numRuns: 50 },
    );
  });
});
