/**
 * SHiNE_DM v1 codec (docs/protocol.md §3): every decode rejection from hex literals, body layouts, keys, pair
 * consistency and strict base64.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fromBase64, fromHex, toBase64, toHex, utf8 } from '../../src/protocol/bytes.js';
import type { ContainerErrorReason, ContainerFields } from '../../src/protocol/container.js';
import {
  ContainerError,
  MAX_BODY,
  MAX_CONTAINER,
  baseKeyOf,
  decodeContainer,
  deleteTargetBaseKey,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  encodeSigned,
  encodeUnsigned,
  messageKeyOf,
  pairProblem,
  pairedKeyOf,
  parseDeleteConversationBody,
  parseDeleteMessageBody,
  parseMessageKey,
  parseReceiptBody,
  parseSyncId,
  receiptTargetBaseKey,
  syncIdOf,
  verifyContainer,
} from '../../src/protocol/container.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import { VECTOR_SEED, codecReason } from '../helpers/codec.js';

// The docs/protocol.md §3 vector, field by field (byte offsets on the right).
const MAGIC = '5348694e455f444d'; //                0..7   "SHiNE_DM"
const V1 = '01'; //                                 8      formatVersion
const T1 = '01'; //                                 9      messageType
const ALICE = '05616c696365'; //                    10..15 fromLogin "alice"
const BOB = '03626f62'; //                          16..19 toLogin "bob"
const TIME = '0000019d345cf37b'; //                 20..27 timeMs 1774700000123
const NONCE = '075bcd15'; //                        28..31 nonce 123456789
const U64_0 = '0000000000000000'; //                32..39 revisionTimeMs, 40..47 reencryptedAtMs
const LEN18 = '00000012'; //                        48..51 bodyLength 18
const BODY = '636970686572746578742d666f722d626f62'; // 52..69 "ciphertext-for-bob"
const SIG =
  '0ce048e4036c10969647bb2e27c736c51d73dc2a829ff55a6139d0121eb6b61c' + // 70..133 signature
  '6f0e9e5dba942219d30e8e36f5aca7d52256664b8517d590647e88197cdef70e';
const VECTOR = MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + LEN18 + BODY + SIG;
/** A placeholder signature: the decoder checks structure only, so bad bodies surface before it matters. */
const NOSIG = '00'.repeat(64);

const seed = VECTOR_SEED;
const publicKey = ed25519PublicKey(seed);

const reasonOf = (input: Uint8Array): ContainerErrorReason | 'OK' => codecReason(() => decodeContainer(input));

function rejects(hex: string, reason: ContainerErrorReason): void {
  assert.equal(reasonOf(fromHex(hex)), reason);
}

/** A container of the given type with a hand-written body (hex) and its bodyLength (u32 hex). */
function withBody(type: string, lenHex: string, bodyHex: string): string {
  return MAGIC + V1 + type + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + lenHex + bodyHex + NOSIG;
}

const encodeFailure = (f: ContainerFields): ContainerErrorReason | 'OK' => codecReason(() => encodeUnsigned(f));

const text: ContainerFields = {
  messageType: 1,
  fromLogin: 'alice',
  toLogin: 'bob',
  timeMs: 1774700000123,
  nonce: 123456789,
  revisionTimeMs: 0,
  reencryptedAtMs: 0,
  body: utf8('ciphertext-for-bob'),
};

describe('decodeContainer accepts', () => {
  it('the test vector assembled from its fields', () => {
    assert.equal(fromHex(VECTOR).length, 134);
    const c = decodeContainer(fromHex(VECTOR));
    assert.equal(c.messageType, 1);
    assert.equal(c.signedLength, 70);
    assert.equal(toHex(c.body), BODY);
    assert.equal(toHex(c.signature), SIG);
    assert.ok(verifyContainer(c, publicKey));
  });

  it('u64 fields up to 2^53-1 and every nonce', () => {
    const c = decodeContainer(
      fromHex(
        MAGIC +
          V1 +
          T1 +
          ALICE +
          BOB +
          '001fffffffffffff' +
          'ffffffff' +
          '001fffffffffffff' +
          '001fffffffffffff' +
          LEN18 +
          BODY +
          NOSIG,
      ),
    );
    assert.equal(c.timeMs, Number.MAX_SAFE_INTEGER);
    assert.equal(c.nonce, 0xffffffff);
    assert.equal(c.revisionTimeMs, Number.MAX_SAFE_INTEGER);
    assert.equal(c.reencryptedAtMs, Number.MAX_SAFE_INTEGER);
  });

  it('the largest container: 32-character logins and a 65 536-byte body', () => {
    const c = encodeSigned(
      { ...text, fromLogin: 'a'.repeat(32), toLogin: 'b'.repeat(32), body: new Uint8Array(MAX_BODY).fill(7) },
      seed,
    );
    assert.equal(c.bytes.length, 108 + MAX_BODY + 64);
    assert.ok(c.bytes.length <= MAX_CONTAINER);
    const d = decodeContainer(c.bytes);
    assert.equal(d.body.length, MAX_BODY);
    assert.ok(verifyContainer(d, publicKey));
  });

  it('a Buffer view into a larger allocation', () => {
    const big = Buffer.alloc(200, 0xee);
    fromHex(VECTOR).forEach((b, i) => (big[17 + i] = b));
    const c = decodeContainer(big.subarray(17, 17 + 134));
    assert.equal(c.timeMs, 1774700000123);
    assert.ok(verifyContainer(c, publicKey));
  });
});

describe('decodeContainer rejects', () => {
  it('wrong magic', () => {
    rejects('5348494e455f444d' + VECTOR.slice(16), 'BAD_MAGIC'); // "SHINE_DM"
    rejects('0000000000000000' + VECTOR.slice(16), 'BAD_MAGIC');
    rejects(VECTOR.slice(2), 'BAD_MAGIC'); // first byte missing: the magic is shifted
  });

  it('input too short to hold the magic', () => {
    rejects('', 'TRUNCATED');
    rejects('5348694e455f44', 'TRUNCATED'); // "SHiNE_D"
    rejects(MAGIC, 'TRUNCATED');
    rejects(MAGIC + V1, 'TRUNCATED');
  });

  it('a version other than 1', () => {
    rejects(MAGIC + '00' + VECTOR.slice(18), 'BAD_VERSION');
    rejects(MAGIC + '02' + VECTOR.slice(18), 'BAD_VERSION');
    rejects(MAGIC + 'ff' + VECTOR.slice(18), 'BAD_VERSION');
  });

  it('message types 0, 9 and 255', () => {
    rejects(MAGIC + V1 + '00' + VECTOR.slice(20), 'BAD_TYPE');
    rejects(MAGIC + V1 + '09' + VECTOR.slice(20), 'BAD_TYPE');
    rejects(MAGIC + V1 + 'ff' + VECTOR.slice(20), 'BAD_TYPE');
  });

  it('bad login syntax', () => {
    const after = TIME + NONCE + U64_0 + U64_0 + LEN18 + BODY + NOSIG;
    const head = MAGIC + V1 + T1;
    rejects(head + '00' + BOB + after, 'BAD_LOGIN'); // empty
    rejects(head + '02' + '616c' + BOB + after, 'BAD_LOGIN'); // "al": 2 characters
    rejects(head + '05' + '416c696365' + BOB + after, 'BAD_LOGIN'); // "Alice": upper case
    rejects(head + '05' + '5f6c696365' + BOB + after, 'BAD_LOGIN'); // "_lice": must start with [a-z0-9]
    rejects(head + '05' + '616c7c6365' + BOB + after, 'BAD_LOGIN'); // "al|ce"
    rejects(head + '05' + '616c3a6365' + BOB + after, 'BAD_LOGIN'); // "al:ce"
    rejects(head + '05' + '616c696365' + '03' + '626f20' + after, 'BAD_LOGIN'); // to "bo "
    rejects(head + '05' + '616c6963e9' + BOB + after, 'BAD_LOGIN'); // Latin-1 "alicé"
    rejects(head + '06' + '616c6963c3a9' + BOB + after, 'BAD_LOGIN'); // UTF-8 "alicé"
    rejects(head + '05' + '616c696300' + BOB + after, 'BAD_LOGIN'); // NUL
    rejects(head + '21' + '61'.repeat(33) + BOB + after, 'BAD_LOGIN'); // 33 characters
    rejects(head + ALICE + '00' + after, 'BAD_LOGIN'); // empty toLogin
  });

  it('fromLogin equal to toLogin', () => {
    rejects(MAGIC + V1 + T1 + ALICE + ALICE + TIME + NONCE + U64_0 + U64_0 + LEN18 + BODY + NOSIG, 'SAME_LOGIN');
  });

  it('a length running past the end', () => {
    rejects(MAGIC + V1 + T1 + 'ff' + '616c696365', 'TRUNCATED'); // login length 255, 5 bytes follow
    rejects(MAGIC + V1 + T1 + ALICE, 'TRUNCATED'); // no toLogin length
    rejects(MAGIC + V1 + T1 + ALICE + BOB + '0000019d', 'TRUNCATED'); // half a timeMs
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + '0000', 'TRUNCATED'); // half a bodyLength
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + '00010000' + BODY + SIG, 'TRUNCATED'); // 65 536 announced
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + '00000013' + BODY + SIG, 'TRUNCATED'); // body eats a signature byte
    rejects(VECTOR.slice(0, -2), 'TRUNCATED'); // 63-byte signature
    rejects(VECTOR.slice(0, 70 * 2), 'TRUNCATED'); // no signature
  });

  it('bodyLength over 65 536, before looking for the body', () => {
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + '00010001' + BODY + SIG, 'BODY_TOO_LARGE');
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + 'ffffffff', 'BODY_TOO_LARGE');
  });

  it('trailing bytes after the signature', () => {
    rejects(VECTOR + '00', 'TRAILING_BYTES');
    rejects(VECTOR + VECTOR, 'TRAILING_BYTES');
    // A shorter bodyLength leaves the real last body byte and signature one byte too long.
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + U64_0 + '00000011' + BODY + SIG, 'TRAILING_BYTES');
  });

  it('a container over 65 792 bytes, before parsing anything', () => {
    const vector = fromHex(VECTOR);
    const over = new Uint8Array(MAX_CONTAINER + 1);
    over.set(vector);
    assert.equal(MAX_CONTAINER, 65_792);
    assert.equal(reasonOf(over), 'TOO_LARGE');
    assert.equal(reasonOf(over.subarray(0, MAX_CONTAINER)), 'TRAILING_BYTES'); // at the limit: parsed
  });

  it('u64 values above 2^53-1 in the header', () => {
    const tail = LEN18 + BODY + NOSIG;
    rejects(MAGIC + V1 + T1 + ALICE + BOB + '0020000000000000' + NONCE + U64_0 + U64_0 + tail, 'BAD_INTEGER');
    rejects(MAGIC + V1 + T1 + ALICE + BOB + 'ffffffffffffffff' + NONCE + U64_0 + U64_0 + tail, 'BAD_INTEGER');
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + '8000000000000000' + U64_0 + tail, 'BAD_INTEGER');
    rejects(MAGIC + V1 + T1 + ALICE + BOB + TIME + NONCE + U64_0 + '0020000000000000' + tail, 'BAD_INTEGER');
  });

  it('an empty text body (types 1 and 2)', () => {
    rejects(withBody('01', '00000000', ''), 'BAD_BODY');
    rejects(withBody('02', '00000000', ''), 'BAD_BODY');
  });

  it('receipt bodies (types 3, 4) that are not 20 bytes', () => {
    const body20 = '0000019d345d0688' + '0000019d345cf37b' + '075bcd15';
    assert.equal(reasonOf(fromHex(withBody('03', '00000014', body20))), 'OK');
    for (const t of ['03', '04']) {
      rejects(withBody(t, '00000000', ''), 'BAD_BODY');
      rejects(withBody(t, '00000013', body20.slice(0, -2)), 'BAD_BODY');
      rejects(withBody(t, '00000015', body20 + '00'), 'BAD_BODY');
    }
  });

  it('delete-message bodies (types 5, 6) that are not 13 bytes', () => {
    const body13 = '0000019d345cf37b' + '075bcd15' + '00';
    assert.equal(reasonOf(fromHex(withBody('05', '0000000d', body13))), 'OK');
    for (const t of ['05', '06']) {
      rejects(withBody(t, '00000000', ''), 'BAD_BODY');
      rejects(withBody(t, '0000000c', body13.slice(0, -2)), 'BAD_BODY');
      rejects(withBody(t, '0000000e', body13 + '00'), 'BAD_BODY');
    }
  });

  it('delete-conversation bodies (types 7, 8) that are not 8 bytes', () => {
    assert.equal(reasonOf(fromHex(withBody('07', '00000008', '0000019d2e671200'))), 'OK');
    for (const t of ['07', '08']) {
      rejects(withBody(t, '00000000', ''), 'BAD_BODY');
      rejects(withBody(t, '00000007', '0000019d2e6712'), 'BAD_BODY');
      rejects(withBody(t, '00000009', '0000019d2e67120000'), 'BAD_BODY');
    }
  });

  it('u64 values above 2^53-1 inside fixed bodies', () => {
    rejects(withBody('03', '00000014', '0020000000000000' + '0000019d345cf37b' + '075bcd15'), 'BAD_INTEGER'); // readAtMs
    rejects(withBody('04', '00000014', '0000019d345d0688' + 'ffffffffffffffff' + '075bcd15'), 'BAD_INTEGER'); // targetTimeMs
    rejects(withBody('05', '0000000d', '0020000000000000' + '075bcd15' + '00'), 'BAD_INTEGER'); // targetTimeMs
    rejects(withBody('08', '00000008', '0020000000000000'), 'BAD_INTEGER'); // deleteBeforeMs
    assert.equal(reasonOf(fromHex(withBody('08', '00000008', '001fffffffffffff'))), 'OK');
  });

  it('targetSender other than 0 or 1', () => {
    assert.equal(reasonOf(fromHex(withBody('06', '0000000d', '0000019d345cf37b' + '075bcd15' + '01'))), 'OK');
    rejects(withBody('05', '0000000d', '0000019d345cf37b' + '075bcd15' + '02'), 'BAD_BODY');
    rejects(withBody('06', '0000000d', '0000019d345cf37b' + '075bcd15' + 'ff'), 'BAD_BODY');
  });

  it('input that is not a Uint8Array, with a ContainerError', () => {
    for (const v of [undefined, null, 'SHiNE_DM', [0x53], new ArrayBuffer(134)]) {
      assert.throws(() => decodeContainer(v as unknown as Uint8Array), ContainerError);
    }
  });
});

describe('encodeUnsigned rejects what the decoder would', () => {
  it('each bad field with its reason', () => {
    const cases: [Partial<ContainerFields>, ContainerErrorReason][] = [
      [{ messageType: 0 as 1 }, 'BAD_TYPE'],
      [{ messageType: 9 as 1 }, 'BAD_TYPE'],
      [{ messageType: 1.5 as 1 }, 'BAD_TYPE'],
      [{ fromLogin: 'Alice' }, 'BAD_LOGIN'],
      [{ toLogin: 'bo' }, 'BAD_LOGIN'],
      [{ toLogin: 'alicé' }, 'BAD_LOGIN'],
      [{ toLogin: 'alice' }, 'SAME_LOGIN'],
      [{ timeMs: -1 }, 'BAD_INTEGER'],
      [{ timeMs: 1.5 }, 'BAD_INTEGER'],
      [{ timeMs: 2 ** 53 }, 'BAD_INTEGER'],
      [{ revisionTimeMs: Number.NaN }, 'BAD_INTEGER'],
      [{ reencryptedAtMs: Infinity }, 'BAD_INTEGER'],
      [{ nonce: -1 }, 'BAD_INTEGER'],
      [{ nonce: 2 ** 32 }, 'BAD_INTEGER'],
      [{ body: new Uint8Array(0) }, 'BAD_BODY'],
      [{ body: new Uint8Array(MAX_BODY + 1) }, 'BODY_TOO_LARGE'],
      [{ messageType: 3, body: new Uint8Array(13) }, 'BAD_BODY'],
      [{ messageType: 6, body: Uint8Array.of(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2) }, 'BAD_BODY'],
      [{ messageType: 7, body: fromHex('0020000000000000') }, 'BAD_INTEGER'],
    ];
    for (const [patch, reason] of cases)
      assert.equal(encodeFailure({ ...text, ...patch }), reason, JSON.stringify(patch));
    assert.equal(encodeFailure({ ...text, nonce: 0xffffffff, timeMs: Number.MAX_SAFE_INTEGER }), 'OK');
  });
});

describe('receipt bodies (3/4)', () => {
  const receipt = { readAtMs: 1774700005000, targetTimeMs: 1774700000123, targetNonce: 123456789 };
  const hex = '0000019d345d0688' + '0000019d345cf37b' + '075bcd15';

  it('encode to readAtMs, targetTimeMs, targetNonce big-endian', () => {
    assert.equal(toHex(encodeReceiptBody(receipt)), hex);
  });

  it('parse back from both types, and point at the message the receipt’s toLogin sent', () => {
    for (const messageType of [3, 4] as const) {
      const fields = { ...text, fromLogin: 'bob', toLogin: 'alice', messageType, body: fromHex(hex) };
      const c = decodeContainer(encodeSigned(fields, seed).bytes);
      assert.deepEqual(parseReceiptBody(c), receipt);
      assert.equal(receiptTargetBaseKey(c), 'alice|bob|1774700000123|123456789');
    }
  });

  it('parse only types 3/4 with a valid body', () => {
    assert.throws(() => parseReceiptBody({ messageType: 1, body: fromHex(hex) }), { reason: 'BAD_TYPE' });
    assert.throws(() => parseReceiptBody({ messageType: 5, body: fromHex(hex) }), { reason: 'BAD_TYPE' });
    assert.throws(() => parseReceiptBody({ messageType: 3, body: fromHex(hex).subarray(1) }), { reason: 'BAD_BODY' });
  });

  it('refuse values the layout cannot carry instead of wrapping them', () => {
    assert.throws(() => encodeReceiptBody({ ...receipt, targetNonce: 2 ** 32 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeReceiptBody({ ...receipt, targetNonce: -1 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeReceiptBody({ ...receipt, readAtMs: -1 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeReceiptBody({ ...receipt, targetTimeMs: 2 ** 53 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeReceiptBody({ ...receipt, targetTimeMs: 0.5 }), { reason: 'BAD_INTEGER' });
  });
});

describe('delete-message bodies (5/6)', () => {
  const hex0 = '0000019d345cf37b' + '075bcd15' + '00';

  it('encode to targetTimeMs, targetNonce, targetSender', () => {
    assert.equal(
      toHex(encodeDeleteMessageBody({ targetTimeMs: 1774700000123, targetNonce: 123456789, targetSender: 0 })),
      hex0,
    );
    assert.equal(
      toHex(encodeDeleteMessageBody({ targetTimeMs: 1, targetNonce: 2, targetSender: 1 })),
      '0000000000000001' + '00000002' + '01',
    );
  });

  it('targetSender 0 names a message of fromLogin, 1 one of toLogin', () => {
    for (const messageType of [5, 6] as const) {
      for (const targetSender of [0, 1] as const) {
        const body = encodeDeleteMessageBody({ targetTimeMs: 1774700000123, targetNonce: 123456789, targetSender });
        const c = decodeContainer(encodeSigned({ ...text, messageType, body }, seed).bytes);
        assert.deepEqual(parseDeleteMessageBody(c), {
          targetTimeMs: 1774700000123,
          targetNonce: 123456789,
          targetSender,
        });
        assert.equal(
          deleteTargetBaseKey(c),
          targetSender === 0 ? 'alice|bob|1774700000123|123456789' : 'bob|alice|1774700000123|123456789',
        );
      }
    }
  });

  it('parse only types 5/6 with a valid body', () => {
    assert.throws(() => parseDeleteMessageBody({ messageType: 3, body: fromHex(hex0) }), { reason: 'BAD_TYPE' });
    assert.throws(() => parseDeleteMessageBody({ messageType: 5, body: fromHex(hex0.slice(0, -2) + '02') }), {
      reason: 'BAD_BODY',
    });
  });

  it('refuse values the layout cannot carry', () => {
    const ok = { targetTimeMs: 1, targetNonce: 2, targetSender: 0 } as const;
    assert.throws(() => encodeDeleteMessageBody({ ...ok, targetNonce: 2 ** 32 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeDeleteMessageBody({ ...ok, targetTimeMs: -1 }), { reason: 'BAD_INTEGER' });
    assert.throws(() => encodeDeleteMessageBody({ ...ok, targetSender: 2 as 0 }), { reason: 'BAD_BODY' });
    assert.throws(() => encodeDeleteMessageBody({ ...ok, targetSender: 256 as 0 }), { reason: 'BAD_BODY' });
  });
});

describe('delete-conversation bodies (7/8)', () => {
  it('encode, decode and parse deleteBeforeMs', () => {
    const body = encodeDeleteConversationBody({ deleteBeforeMs: 1774600000000 });
    assert.equal(toHex(body), '0000019d2e671200');
    for (const messageType of [7, 8] as const) {
      const c = decodeContainer(encodeSigned({ ...text, messageType, body }, seed).bytes);
      assert.deepEqual(parseDeleteConversationBody(c), { deleteBeforeMs: 1774600000000 });
    }
    assert.throws(() => parseDeleteConversationBody({ messageType: 2, body }), { reason: 'BAD_TYPE' });
    assert.throws(() => encodeDeleteConversationBody({ deleteBeforeMs: 2 ** 53 }), { reason: 'BAD_INTEGER' });
  });
});

describe('keys', () => {
  it('baseKeyOf, messageKeyOf and pairedKeyOf', () => {
    assert.equal(baseKeyOf(text), 'alice|bob|1774700000123|123456789');
    assert.equal(messageKeyOf(text), 'alice|bob|1774700000123|123456789|1');
    assert.equal(messageKeyOf({ ...text, messageType: 2 }), 'alice|bob|1774700000123|123456789|2');
    const pairs = [
      [1, 2],
      [3, 4],
      [5, 6],
      [7, 8],
    ] as const;
    for (const [odd, even] of pairs) {
      assert.equal(pairedKeyOf({ ...text, messageType: odd }), `alice|bob|1774700000123|123456789|${even}`);
      assert.equal(pairedKeyOf({ ...text, messageType: even }), `alice|bob|1774700000123|123456789|${odd}`);
    }
  });

  it('syncIdOf and parseSyncId', () => {
    const id = syncIdOf('alice|bob|1774700000123|123456789|2', 1774700009999, 0);
    assert.equal(id, 'alice|bob|1774700000123|123456789|2:1774700009999:0');
    assert.deepEqual(parseSyncId(id), {
      primaryMessageKey: 'alice|bob|1774700000123|123456789|2',
      revisionTimeMs: 1774700009999,
      reencryptedAtMs: 0,
    });
    assert.deepEqual(parseSyncId(`k:${Number.MAX_SAFE_INTEGER}:0`), {
      primaryMessageKey: 'k',
      revisionTimeMs: Number.MAX_SAFE_INTEGER,
      reencryptedAtMs: 0,
    });
  });

  it('parseSyncId rejects malformed and non-canonical tokens', () => {
    for (const bad of [
      '',
      'k',
      'k:1',
      ':1:2',
      'k:1:2:3',
      'k:-1:0',
      'k:1.5:0',
      'k:1e3:0',
      'k: 1:0',
      'k:1:',
      'k:01:0', // leading zero: not what syncIdOf writes
      'k:0:00',
      'k:9007199254740992:0', // above 2^53-1: would silently round
      'k:0:99999999999999999',
    ]) {
      assert.equal(parseSyncId(bad), null, bad);
    }
  });

  it('parseMessageKey', () => {
    assert.deepEqual(parseMessageKey('alice|bob|1774700000123|123456789|1'), {
      fromLogin: 'alice',
      toLogin: 'bob',
      timeMs: 1774700000123,
      nonce: 123456789,
      messageType: 1,
    });
    assert.deepEqual(parseMessageKey(`bob|alice|${Number.MAX_SAFE_INTEGER}|4294967295|8`)?.nonce, 4294967295);
    assert.deepEqual(parseMessageKey('bob|alice|0|0|8')?.timeMs, 0);
  });

  it('parseMessageKey rejects malformed and non-canonical keys', () => {
    for (const bad of [
      '',
      'alice|bob|1774700000123|123456789',
      'alice|bob|1774700000123|123456789|1|1',
      'alice|bob|1774700000123|123456789|0',
      'alice|bob|1774700000123|123456789|9',
      'alice|bob|1774700000123|123456789|12',
      'Alice|bob|1774700000123|123456789|1',
      'alice|b|1774700000123|123456789|1',
      'alice|alice|1774700000123|123456789|1', // no container has fromLogin = toLogin
      'alice|bob|-1|123456789|1',
      'alice|bob|1.5|123456789|1',
      'alice|bob|9007199254740992|123456789|1',
      'alice|bob|1774700000123|4294967296|1',
      'alice|bob|01774700000123|123456789|1', // leading zero: another string for the same message
      'alice|bob|1774700000123|0123456789|1',
      'alice|bob| 1774700000123|123456789|1',
      'alice|bob|1774700000123|123456789|1 ',
    ]) {
      assert.equal(parseMessageKey(bad), null, bad);
    }
  });
});

describe('pairProblem', () => {
  const incoming = text;
  const outgoing: ContainerFields = { ...text, messageType: 2, body: utf8('ciphertext-for-alice') };

  it('accepts a consistent text pair whose ciphertexts differ', () => {
    assert.equal(pairProblem(incoming, outgoing), null);
  });

  it('TYPES: not (2k-1, 2k)', () => {
    const t = (a: number, b: number) =>
      pairProblem({ ...incoming, messageType: a as 1 }, { ...outgoing, messageType: b as 2 });
    assert.equal(t(1, 1), 'TYPES');
    assert.equal(t(2, 2), 'TYPES');
    assert.equal(t(2, 1), 'TYPES'); // swapped
    assert.equal(t(2, 3), 'TYPES'); // even "incoming"
    assert.equal(t(1, 4), 'TYPES');
    assert.equal(t(3, 2), 'TYPES');
  });

  it('FIELDS: any header field differs', () => {
    const patches: Partial<ContainerFields>[] = [
      { fromLogin: 'carol' },
      { toLogin: 'carol' },
      { timeMs: text.timeMs + 1 },
      { nonce: text.nonce + 1 },
      { revisionTimeMs: 1 },
      { reencryptedAtMs: 1 },
    ];
    for (const p of patches) {
      assert.equal(pairProblem({ ...incoming, ...p }, outgoing), 'FIELDS', JSON.stringify(p));
      assert.equal(pairProblem(incoming, { ...outgoing, ...p }), 'FIELDS', JSON.stringify(p));
    }
  });

  it('BODIES: types 3..8 carry the same body in both copies', () => {
    const receipt = (nonce: number) => encodeReceiptBody({ readAtMs: 1, targetTimeMs: 2, targetNonce: nonce });
    assert.equal(
      pairProblem({ ...incoming, messageType: 3, body: receipt(1) }, { ...outgoing, messageType: 4, body: receipt(1) }),
      null,
    );
    assert.equal(
      pairProblem({ ...incoming, messageType: 3, body: receipt(1) }, { ...outgoing, messageType: 4, body: receipt(2) }),
      'BODIES',
    );
    const del = (targetSender: 0 | 1) => encodeDeleteMessageBody({ targetTimeMs: 1, targetNonce: 2, targetSender });
    assert.equal(
      pairProblem({ ...incoming, messageType: 5, body: del(0) }, { ...outgoing, messageType: 6, body: del(1) }),
      'BODIES',
    );
    const conv = (ms: number) => encodeDeleteConversationBody({ deleteBeforeMs: ms });
    assert.equal(
      pairProblem({ ...incoming, messageType: 7, body: conv(5) }, { ...outgoing, messageType: 8, body: conv(6) }),
      'BODIES',
    );
    assert.equal(
      pairProblem(
        { ...incoming, messageType: 7, body: conv(5) },
        { ...outgoing, messageType: 8, body: conv(5).subarray(1) },
      ),
      'BODIES',
    );
  });

  it('reports TYPES before FIELDS before BODIES', () => {
    const conv = (ms: number) => encodeDeleteConversationBody({ deleteBeforeMs: ms });
    assert.equal(
      pairProblem(
        { ...incoming, messageType: 7, body: conv(5) },
        { ...outgoing, messageType: 7, nonce: 1, body: conv(6) },
      ),
      'TYPES',
    );
    assert.equal(
      pairProblem(
        { ...incoming, messageType: 7, body: conv(5) },
        { ...outgoing, messageType: 8, nonce: 1, body: conv(6) },
      ),
      'FIELDS',
    );
  });
});

describe('strict base64', () => {
  it('RFC 4648 vectors both ways', () => {
    const vectors: [string, string][] = [
      ['', ''],
      ['f', 'Zg=='],
      ['fo', 'Zm8='],
      ['foo', 'Zm9v'],
      ['foob', 'Zm9vYg=='],
      ['fooba', 'Zm9vYmE='],
      ['foobar', 'Zm9vYmFy'],
    ];
    for (const [plain, b64] of vectors) {
      assert.equal(toBase64(utf8(plain)), b64);
      assert.deepEqual(fromBase64(b64), utf8(plain));
    }
    assert.equal(toBase64(fromHex('fbff')), '+/8=');
  });

  it('round-trips every length 0..64 and the vector public key', () => {
    for (let n = 0; n <= 64; n++) {
      const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 97 + n * 31) & 255);
      const b64 = toBase64(bytes);
      assert.equal(b64, Buffer.from(bytes).toString('base64'));
      assert.deepEqual(fromBase64(b64), bytes);
    }
    assert.equal(toBase64(publicKey), 'ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=');
    assert.deepEqual(fromBase64('ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ='), publicKey);
  });

  it('rejects missing or misplaced padding', () => {
    for (const bad of ['Zg', 'Zg=', 'Zm8', 'Zg===', 'Zm9vYg', 'Zm=v', 'Z===', '====', '=', 'Zg==Zg==', 'Zm8=Zm9v']) {
      assert.equal(fromBase64(bad), null, bad);
    }
  });

  it('rejects non-canonical trailing bits', () => {
    for (const bad of ['Zh==', 'Zv==', 'Zm9=', 'Zm+=', 'AB==', 'AAB=']) assert.equal(fromBase64(bad), null, bad);
    assert.deepEqual(fromBase64('AA=='), Uint8Array.of(0));
    assert.deepEqual(fromBase64('AAA='), Uint8Array.of(0, 0));
  });

  it('rejects characters outside the standard alphabet', () => {
    for (const bad of [
      'Zm9v-_==',
      'Zm9v_A==',
      'Zm9v YmFy',
      'Zm9v\nYmFy',
      ' Zm9vYmE',
      'Zm9vYmE\t',
      'Zm9é',
      'Zm9\u0000',
      'Zm9v.A==',
      'Zm9\u{1F600}',
    ]) {
      assert.equal(fromBase64(bad), null, JSON.stringify(bad));
    }
  });
});
