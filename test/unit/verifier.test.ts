/** The three Ed25519 verifiers (noble, sodium-native, node:crypto) give the same answers. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';
import fc from 'fast-check';
import { fromHex, toHex, utf8 } from '../../src/protocol/bytes.js';
import { decodeContainer, verifyContainer } from '../../src/protocol/container.js';
import type { SignatureVerifier } from '../../src/protocol/ed25519.js';
import { ed25519PublicKey, isSmallOrderEncoding, nobleVerifier, signEd25519 } from '../../src/protocol/ed25519.js';
import { nodeCryptoVerifier, sodiumVerifier } from '../../src/server/crypto/verifier.js';

const VECTOR = fromHex(`
5348694e455f444d010105616c69636503626f620000019d345cf37b075bcd150000000000000000000000000000
000000000012636970686572746578742d666f722d626f620ce048e4036c10969647bb2e27c736c51d73dc2a829f
f55a6139d0121eb6b61c6f0e9e5dba942219d30e8e36f5aca7d52256664b8517d590647e88197cdef70e`);
const vectorSeed = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
const vectorKey = ed25519PublicKey(vectorSeed);

const verifiers: [string, SignatureVerifier][] = [
  ['noble', nobleVerifier],
  ['sodium', sodiumVerifier],
  ['node', nodeCryptoVerifier],
];

/** Every verifier's answer; asserts they agree and that none throws. */
function verdict(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean {
  const answers = verifiers.map(([name, v]) => [name, v.verify(signature, message, publicKey)] as const);
  for (const [name, answer] of answers) assert.equal(typeof answer, 'boolean', name);
  assert.ok(
    answers.every(([, a]) => a === answers[0]![1]),
    `verifiers disagree: ${answers.map(([n, a]) => `${n}=${String(a)}`).join(' ')}`,
  );
  return answers[0]![1];
}

describe('Ed25519 verifiers agree', () => {
  it('on the test vector container, and on it changed', () => {
    const c = decodeContainer(VECTOR);
    for (const [name, v] of verifiers) assert.ok(verifyContainer(c, vectorKey, v), name);
    const signed = VECTOR.subarray(0, c.signedLength);
    assert.equal(verdict(c.signature, signed, vectorKey), true);
    const otherKey = ed25519PublicKey(new Uint8Array(32).fill(9));
    assert.equal(verdict(c.signature, signed, otherKey), false);
    for (const at of [0, 20, 69]) {
      const m = signed.slice();
      m[at]! ^= 1;
      assert.equal(verdict(c.signature, m, vectorKey), false);
    }
    for (const at of [0, 31, 32, 63]) {
      const s = c.signature.slice();
      s[at]! ^= 0x40;
      assert.equal(verdict(s, signed, vectorKey), false);
    }
  });

  it('on random keys and messages: valid, other message, other key, changed signature', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ maxLength: 300 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.nat(63),
        fc.integer({ min: 1, max: 255 }),
        (seed, message, otherSeed, at, xor) => {
          const publicKey = ed25519PublicKey(seed);
          const signature = signEd25519(message, seed);
          assert.equal(verdict(signature, message, publicKey), true);
          assert.equal(verdict(signature, Uint8Array.from([...message, 0]), publicKey), false);
          const otherKey = ed25519PublicKey(otherSeed);
          if (otherKey.some((b, i) => b !== publicKey[i])) assert.equal(verdict(signature, message, otherKey), false);
          const changed = signature.slice();
          changed[at]! ^= xor;
          assert.equal(verdict(changed, message, publicKey), false);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('on garbage keys and signatures: false from each, never a throw', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 64, maxLength: 64 }),
        fc.uint8Array({ maxLength: 40 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (sig, msg, key) => {
          assert.equal(verdict(sig, msg, key), false);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('on wrong lengths: false from each, never a throw', () => {
    const message = utf8('hello');
    const signature = signEd25519(message, vectorSeed);
    const longer = (b: Uint8Array) => Uint8Array.from([...b, 0]);
    assert.equal(verdict(signature, message, vectorKey), true);
    assert.equal(verdict(signature.subarray(0, 63), message, vectorKey), false);
    assert.equal(verdict(longer(signature), message, vectorKey), false); // sodium-native alone would read 64 of 65
    assert.equal(verdict(new Uint8Array(0), message, vectorKey), false);
    assert.equal(verdict(signature, message, vectorKey.subarray(0, 31)), false);
    assert.equal(verdict(signature, message, longer(vectorKey)), false);
    assert.equal(verdict(signature, message, new Uint8Array(0)), false);
  });

  it('on a non-canonical S (S + L): rejected by each', () => {
    const message = utf8('malleability');
    const signature = signEd25519(message, vectorSeed);
    const L = 2n ** 252n + 27742317777372353535851937790883648493n;
    let s = 0n;
    for (let i = 31; i >= 0; i--) s = (s << 8n) | BigInt(signature[32 + i]!);
    s += L;
    const malleated = signature.slice();
    for (let i = 0; i < 32; i++, s >>= 8n) malleated[32 + i] = Number(s & 255n);
    assert.equal(verdict(malleated, message, vectorKey), false);
  });
});

describe("Ed25519 verifiers agree where RFC 8032 leaves a choice: libsodium's rules", () => {
  // RFC 8032 leaves small-order points and the cofactor to the implementation: plain noble (ZIP 215)
  // and OpenSSL accept the identity signature under a small-order key; libsodium refuses small-order
  // keys and R and checks [S]B = R + [k]A without the cofactor. All three verifiers here follow libsodium.
  const { Point } = ed25519;
  const L = Point.Fn.ORDER;
  const le32 = (n: bigint) => Uint8Array.from({ length: 32 }, (_, i) => Number((n >> BigInt(8 * i)) & 255n));
  const leNumber = (b: Uint8Array) => b.reduceRight((n, x) => (n << 8n) | BigInt(x), 0n);
  const challenge = (r: Uint8Array, key: Uint8Array, message: Uint8Array) =>
    leNumber(sha512(Uint8Array.from([...r, ...key, ...message]))) % L;
  /** A signature by secret scalar `a` under the encoded key `key`, with nonce point [r]B (r = 0 gives R = identity). */
  function signWith(a: bigint, key: Uint8Array, r: bigint, message: Uint8Array): Uint8Array {
    const R = r === 0n ? Point.ZERO.toBytes() : Point.BASE.multiply(r).toBytes();
    const S = (r + challenge(R, key, message) * a) % L;
    return Uint8Array.from([...R, ...le32(S)]);
  }
  const eightTorsion = Point.fromBytes(fromHex('26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05'));

  it('a small-order key is refused, even with the identity signature that fits any message under it', () => {
    const identityKey = fromHex('01' + '00'.repeat(31));
    const identitySignature = fromHex('01' + '00'.repeat(63)); // R = identity, S = 0
    assert.equal(ed25519.verify(identitySignature, utf8('anything'), identityKey), true, 'plain noble takes it');
    for (const key of [identityKey, eightTorsion.toBytes(), eightTorsion.double().toBytes()]) {
      assert.ok(isSmallOrderEncoding(key));
      assert.equal(verdict(identitySignature, utf8('anything at all'), key), false);
    }
  });

  it('a small-order key in a non-canonical encoding (sign bit set, or y ≥ p) is refused too', () => {
    // Each decodes to the identity (y = 1) or the point of order 2 (y = −1) in a lax decoder, under which
    // R = B, S = 1 fits every message.
    const signature = Uint8Array.from([...Point.BASE.toBytes(), ...le32(1n)]);
    const keys = [
      fromHex('01' + '00'.repeat(30) + '80'), // y = 1 with the sign bit
      fromHex('ee' + 'ff'.repeat(30) + '7f'), // y = p + 1
      fromHex('ed' + 'ff'.repeat(30) + '7f'), // y = p
      fromHex('ec' + 'ff'.repeat(30) + 'ff'), // y = p − 1 with the sign bit
    ];
    for (const key of keys) {
      assert.ok(isSmallOrderEncoding(key), toHex(key));
      for (const message of [utf8('one'), utf8('two')])
        assert.equal(verdict(signature, message, key), false, toHex(key));
    }
  });

  it('an R of small order is refused, though the equation holds', () => {
    const a = 123456789n;
    const key = Point.BASE.multiply(a).toBytes();
    const message = utf8('r = 0');
    const signature = signWith(a, key, 0n, message);
    assert.equal(ed25519.verify(signature, message, key), true, 'plain noble takes it');
    assert.equal(verdict(signature, message, key), false);
    assert.equal(verdict(signWith(a, key, 987654321n, message), message, key), true, 'the same key with a proper R');
  });

  it('a key with a torsion part: only signatures that meet the equation without the cofactor', () => {
    const a = 5555555555n;
    const key = Point.BASE.multiply(a).add(eightTorsion).toBytes();
    assert.equal(isSmallOrderEncoding(key), false);
    const r = 777n;
    const R = Point.BASE.multiply(r).toBytes();
    let seen = { cofactorOnly: 0, exact: 0 };
    for (let i = 0; seen.cofactorOnly < 3 || seen.exact < 3; i++) {
      const message = utf8(`torsion ${i}`);
      const signature = signWith(a, key, r, message);
      assert.equal(ed25519.verify(signature, message, key), true, 'plain noble (cofactored) takes every one');
      // [S]B − R − [k]A = −[k]T: zero exactly when 8 divides k.
      const exact = challenge(R, key, message) % 8n === 0n;
      assert.equal(verdict(signature, message, key), exact);
      seen = exact ? { ...seen, exact: seen.exact + 1 } : { ...seen, cofactorOnly: seen.cofactorOnly + 1 };
    }
  });
});

describe('nodeCryptoVerifier key cache', () => {
  it('stays correct past its bound (more distinct keys than it keeps)', () => {
    const message = utf8('cache');
    const signature = signEd25519(message, vectorSeed);
    // Valid curve points that are nobody's key: 1100 > the cache bound, cheap to make by point addition.
    const others: Uint8Array[] = [];
    for (let p = ed25519.Point.BASE, i = 0; i < 1100; i++, p = p.add(ed25519.Point.BASE)) others.push(p.toBytes());
    for (let round = 0; round < 2; round++) {
      assert.equal(nodeCryptoVerifier.verify(signature, message, vectorKey), true);
      for (const key of others) assert.equal(nodeCryptoVerifier.verify(signature, message, key), false);
      assert.equal(nodeCryptoVerifier.verify(signature, message, vectorKey), true);
    }
  });

  it('reads the key through a view, not the whole underlying buffer', () => {
    const message = utf8('view');
    const signature = signEd25519(message, vectorSeed);
    const backing = new Uint8Array(100).fill(0xaa);
    backing.set(vectorKey, 40);
    assert.equal(nodeCryptoVerifier.verify(signature, message, backing.subarray(40, 72)), true);
    assert.equal(sodiumVerifier.verify(signature, message, backing.subarray(40, 72)), true);
  });
});
