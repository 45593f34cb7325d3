/**
 * Property tests of the SHiNE_DM v1 codec (docs/protocol.md §3): round trips of all eight types, rejection of every
 * single-byte change of a signed container, and robustness against arbitrary bytes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { bytesEqual, fromBase64, fromHex, toBase64 } from '../../src/protocol/bytes.js';
import type { Container, ContainerFields, MessageType } from '../../src/protocol/container.js';
import {
  ContainerError,
  MAGIC,
  MAX_CONTAINER,
  decodeContainer,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  encodeSigned,
  encodeUnsigned,
  messageKeyOf,
  parseDeleteConversationBody,
  parseDeleteMessageBody,
  parseMessageKey,
  parseReceiptBody,
  parseSyncId,
  syncIdOf,
  verifyContainer,
} from '../../src/protocol/container.js';
import type { SignatureVerifier } from '../../src/protocol/ed25519.js';
import { ed25519PublicKey, nobleVerifier } from '../../src/protocol/ed25519.js';
import { LOGIN_RE } from '../../src/protocol/login.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { VECTOR_SEED, tryCodec, withByte } from '../helpers/codec.js';

const VECTOR = fromHex(`
5348694e455f444d010105616c69636503626f620000019d345cf37b075bcd150000000000000000000000000000
000000000012636970686572746578742d666f722d626f620ce048e4036c10969647bb2e27c736c51d73dc2a829f
f55a6139d0121eb6b61c6f0e9e5dba942219d30e8e36f5aca7d52256664b8517d590647e88197cdef70e`);
const VECTOR_KEY = ed25519PublicKey(VECTOR_SEED);

// ---- arbitraries ----

const login = fc.stringMatching(LOGIN_RE);
const u64 = fc.maxSafeNat();
const u32 = fc.tuple(fc.nat(0xffff), fc.nat(0xffff)).map(([hi, lo]) => hi * 0x10000 + lo);
const seed = fc.uint8Array({ minLength: 32, maxLength: 32 });

/** A body of the given type, with the record it encodes for the fixed layouts. */
function bodyOf(type: MessageType, maxText: number): fc.Arbitrary<{ body: Uint8Array; parsed: unknown }> {
  switch (type) {
    case 1:
    case 2:
      return fc.uint8Array({ minLength: 1, maxLength: maxText }).map((body) => ({ body, parsed: null }));
    case 3:
    case 4:
      return fc
        .record({ readAtMs: u64, targetTimeMs: u64, targetNonce: u32 })
        .map((r) => ({ body: encodeReceiptBody(r), parsed: { ...r } }));
    case 5:
    case 6:
      return fc
        .record({ targetTimeMs: u64, targetNonce: u32, targetSender: fc.constantFrom(0 as const, 1 as const) })
        .map((r) => ({ body: encodeDeleteMessageBody(r), parsed: { ...r } }));
    case 7:
    case 8:
      return fc
        .record({ deleteBeforeMs: u64 })
        .map((r) => ({ body: encodeDeleteConversationBody(r), parsed: { ...r } }));
  }
}

function fieldsArb(maxText: number): fc.Arbitrary<{ fields: ContainerFields; parsed: unknown }> {
  return fc
    .constantFrom<MessageType>(1, 2, 3, 4, 5, 6, 7, 8)
    .chain((messageType) =>
      fc.record({
        messageType: fc.constant(messageType),
        fromLogin: login,
        toLogin: login,
        timeMs: u64,
        nonce: u32,
        revisionTimeMs: u64,
        reencryptedAtMs: u64,
        b: bodyOf(messageType, maxText),
      }),
    )
    .filter((r) => r.fromLogin !== r.toLogin)
    .map(({ b, ...rest }) => ({ fields: { ...rest, body: b.body }, parsed: b.parsed }));
}

/** A valid signed container with its signer's public key. */
const signedArb = fc
  .tuple(fieldsArb(64), seed)
  .map(([{ fields }, s]) => ({ c: encodeSigned(fields, s), publicKey: ed25519PublicKey(s) }));

// ---- helpers ----

/** Decodes; any throw other than ContainerError fails the test. */
const tryDecode = (bytes: Uint8Array): Container | ContainerError => tryCodec(() => decodeContainer(bytes));

function accepted(bytes: Uint8Array, publicKey: Uint8Array, verifier: SignatureVerifier): boolean {
  const c = tryDecode(bytes);
  return !(c instanceof ContainerError) && verifyContainer(c, publicKey, verifier);
}

function describeChange(at: number, from: number, to: number): string {
  return `byte ${at}: ${from.toString(16)} -> ${to.toString(16)}`;
}

// ---- properties ----

describe('round trip', () => {
  it('encode → decode gives back every field of all 8 types, and the signature verifies', () => {
    const signer = Uint8Array.from({ length: 32 }, (_, i) => 255 - i);
    const publicKey = ed25519PublicKey(signer);
    fc.assert(
      fc.property(fieldsArb(300), ({ fields, parsed }) => {
        const c = encodeSigned(fields, signer);
        const d = decodeContainer(c.bytes);
        const { body, ...header } = fields;
        assert.deepEqual(
          { ...d, body: null, signature: null, bytes: null, signedLength: null },
          { ...header, body: null, signature: null, bytes: null, signedLength: null },
        );
        assert.ok(bytesEqual(d.body, body));
        assert.ok(bytesEqual(d.signature, c.signature));
        assert.equal(d.signedLength, c.signedLength);
        assert.equal(d.bytes.length, d.signedLength + 64);
        assert.ok(bytesEqual(encodeUnsigned(d), d.bytes.subarray(0, d.signedLength)));
        assert.ok(verifyContainer(d, publicKey, sodiumVerifier));
        if (d.messageType === 3 || d.messageType === 4) assert.deepEqual(parseReceiptBody(d), parsed);
        if (d.messageType === 5 || d.messageType === 6) assert.deepEqual(parseDeleteMessageBody(d), parsed);
        if (d.messageType === 7 || d.messageType === 8) assert.deepEqual(parseDeleteConversationBody(d), parsed);
        assert.deepEqual(parseMessageKey(messageKeyOf(d)), {
          fromLogin: d.fromLogin,
          toLogin: d.toLogin,
          timeMs: d.timeMs,
          nonce: d.nonce,
          messageType: d.messageType,
        });
        assert.deepEqual(parseSyncId(syncIdOf(messageKeyOf(d), d.revisionTimeMs, d.reencryptedAtMs)), {
          primaryMessageKey: messageKeyOf(d),
          revisionTimeMs: d.revisionTimeMs,
          reencryptedAtMs: d.reencryptedAtMs,
        });
      }),
      { numRuns: 300 },
    );
  });

  it('the parsers accept only the strings the key builders write', () => {
    const piece = fc.oneof(
      login,
      fc.stringMatching(/^-?[0-9]{0,17}$/),
      fc.constantFrom('0', '00', '4294967295', '4294967296', '9007199254740991', '9007199254740992'),
      fc.string({ maxLength: 6 }),
    );
    fc.assert(
      fc.property(fc.array(piece, { minLength: 4, maxLength: 6 }), fc.integer({ min: 0, max: 10 }), (parts, t) => {
        const key = [...parts.slice(0, 4), String(t)].join('|');
        const parsed = parseMessageKey(key);
        if (parsed) assert.equal(messageKeyOf(parsed), key);
        const syncId = parts.slice(0, 3).join(':');
        const s = parseSyncId(syncId);
        if (s) assert.equal(syncIdOf(s.primaryMessageKey, s.revisionTimeMs, s.reencryptedAtMs), syncId);
      }),
      { numRuns: 2000 },
    );
  });

  it('base64: toBase64 matches Node, fromBase64 inverts it and accepts only canonical text', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 80 }), (bytes) => {
        const b64 = toBase64(bytes);
        assert.equal(b64, Buffer.from(bytes).toString('base64'));
        assert.deepEqual(fromBase64(b64), bytes);
      }),
      { numRuns: 1000 },
    );
    const chars = fc.constantFrom(
      ...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ \n'.split(''),
    );
    fc.assert(
      fc.property(fc.array(chars, { maxLength: 16 }), (cs) => {
        const text = cs.join('');
        const decoded = fromBase64(text);
        const canonical = Buffer.from(text, 'base64').toString('base64') === text;
        assert.equal(decoded !== null, canonical, JSON.stringify(text));
        if (decoded) assert.ok(bytesEqual(decoded, Buffer.from(text, 'base64')));
      }),
      { numRuns: 5000 },
    );
  });
});

describe('every single-byte change is rejected', () => {
  it('the test vector: all 255 other values at each of its 134 positions (sodium)', () => {
    assert.ok(accepted(VECTOR, VECTOR_KEY, sodiumVerifier));
    let verified = 0;
    for (let at = 0; at < VECTOR.length; at++) {
      for (let v = 0; v < 256; v++) {
        if (v === VECTOR[at]) continue;
        const changed = withByte(VECTOR, at, v);
        const c = tryDecode(changed);
        if (c instanceof ContainerError) continue;
        verified++;
        assert.equal(verifyContainer(c, VECTOR_KEY, sodiumVerifier), false, describeChange(at, VECTOR[at]!, v));
      }
    }
    // The body and the signature can take any value, so these changes reached the signature check.
    assert.ok(verified >= (18 + 64) * 255, `only ${verified} changes reached verification`);
  });

  it('the test vector: bits 0 and 7 of each position (noble, the client verifier)', () => {
    for (let at = 0; at < VECTOR.length; at++) {
      for (const mask of [0x01, 0x80]) {
        assert.equal(
          accepted(withByte(VECTOR, at, VECTOR[at]! ^ mask), VECTOR_KEY, nobleVerifier),
          false,
          describeChange(at, VECTOR[at]!, VECTOR[at]! ^ mask),
        );
      }
    }
  });

  it('the test vector: truncated at every length, or with any byte appended', () => {
    for (let n = 0; n < VECTOR.length; n++) {
      const r = tryDecode(VECTOR.subarray(0, n));
      assert.ok(r instanceof ContainerError && r.reason === 'TRUNCATED', `length ${n}`);
    }
    for (let v = 0; v < 256; v++) {
      const longer = new Uint8Array(VECTOR.length + 1);
      longer.set(VECTOR);
      longer[VECTOR.length] = v;
      const r = tryDecode(longer);
      assert.ok(r instanceof ContainerError && r.reason === 'TRAILING_BYTES', `appended ${v}`);
    }
  });

  it('random valid containers of all types: several values at every position, truncation, one more byte', () => {
    fc.assert(
      fc.property(signedArb, fc.integer({ min: 1, max: 255 }), fc.nat(255), ({ c, publicKey }, xor, extra) => {
        const bytes = c.bytes;
        assert.ok(accepted(bytes, publicKey, sodiumVerifier));
        for (let at = 0; at < bytes.length; at++) {
          const old = bytes[at]!;
          for (const v of new Set([old ^ 0x01, old ^ 0x80, old ^ 0xff, old ^ xor, (old + 1) & 255])) {
            assert.equal(
              accepted(withByte(bytes, at, v), publicKey, sodiumVerifier),
              false,
              describeChange(at, old, v),
            );
          }
        }
        for (let n = 0; n < bytes.length; n++) {
          const r = tryDecode(bytes.subarray(0, n));
          assert.ok(r instanceof ContainerError && r.reason === 'TRUNCATED', `length ${n}`);
        }
        const longer = new Uint8Array(bytes.length + 1);
        longer.set(bytes);
        longer[bytes.length] = extra;
        const r = tryDecode(longer);
        assert.ok(r instanceof ContainerError && r.reason === 'TRAILING_BYTES');
      }),
      { numRuns: 60 },
    );
  });
});

describe('arbitrary input throws only ContainerError', () => {
  const key = fc.uint8Array({ minLength: 32, maxLength: 32 });
  /** Decoding fails with ContainerError or succeeds, and then verification returns a boolean. */
  const robust = (bytes: Uint8Array, publicKey: Uint8Array): void => {
    const c = tryDecode(bytes);
    if (!(c instanceof ContainerError)) {
      assert.equal(typeof verifyContainer(c, publicKey, sodiumVerifier), 'boolean');
      assert.equal(typeof verifyContainer(c, publicKey, nobleVerifier), 'boolean');
    }
  };

  it('random bytes', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 400 }), key, robust), { numRuns: 3000 });
  });

  it('random bytes after a valid magic and version, with a type from 0..9', () => {
    const prefixed = fc
      .tuple(fc.integer({ min: 0, max: 9 }), fc.uint8Array({ maxLength: 400 }))
      .map(([t, rest]) => Uint8Array.from([...MAGIC, 1, t, ...rest]));
    fc.assert(fc.property(prefixed, key, robust), { numRuns: 3000 });
  });

  it('valid containers with random edits, cuts and extensions', () => {
    const edited = fc
      .tuple(
        signedArb,
        fc.array(fc.tuple(fc.nat(), fc.nat(255)), { maxLength: 6 }),
        fc.integer({ min: -70, max: 70 }),
        fc.uint8Array({ maxLength: 70 }),
      )
      .map(([{ c, publicKey }, edits, cut, tail]) => {
        const out = c.bytes.slice();
        for (const [at, v] of edits) out[at % out.length] = v;
        const cutAt = Math.max(0, out.length + Math.min(cut, 0));
        return {
          bytes: cut < 0 ? out.subarray(0, cutAt) : Uint8Array.from([...out, ...tail.subarray(0, cut)]),
          publicKey,
        };
      });
    fc.assert(
      fc.property(edited, ({ bytes, publicKey }) => robust(bytes, publicKey)),
      { numRuns: 300 },
    );
  });

  it('sizes around the container limit', () => {
    fc.assert(
      fc.property(fc.integer({ min: MAX_CONTAINER - 8, max: MAX_CONTAINER + 8 }), fc.nat(255), (size, fill) => {
        const bytes = new Uint8Array(size).fill(fill);
        bytes.set(VECTOR.subarray(0, Math.min(size, 52)));
        const r = tryDecode(bytes);
        assert.ok(r instanceof ContainerError);
        if (size > MAX_CONTAINER) assert.equal(r.reason, 'TOO_LARGE');
      }),
      { numRuns: 40 },
    );
  });
});
