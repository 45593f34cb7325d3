import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fromBase64, portableFromBase64, portableToBase64, toBase64 } from '../../src/protocol/bytes.js';

describe('base64: the Buffer fast path and the portable (browser) code agree', () => {
  it('encode and decode the same for any bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        const text = toBase64(bytes);
        assert.equal(portableToBase64(bytes), text);
        assert.deepEqual(portableFromBase64(text), new Uint8Array(bytes));
        assert.deepEqual(fromBase64(text), new Uint8Array(bytes));
      }),
      { numRuns: 500 },
    );
  });

  it('reject the same non-canonical, padded-wrong or foreign texts', () => {
    const samples = [
      '',
      'QQ==',
      'QR==',
      'QQ=',
      'QQ',
      'Q===',
      'QUJD',
      'QUJ',
      'QU JD',
      'QUJD\n',
      '-_-_',
      'QUI=',
      'QUJ=',
      '====',
      'QQ==QQ==',
      'ü+++',
    ];
    for (const s of samples) assert.deepEqual(fromBase64(s), portableFromBase64(s), JSON.stringify(s));
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), (s) => {
        assert.deepEqual(fromBase64(s), portableFromBase64(s));
      }),
      { numRuns: 2000 },
    );
  });
});
