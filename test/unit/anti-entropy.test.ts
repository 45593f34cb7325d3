import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { splitRange } from '../../src/server/replication/anti-entropy.js';
import { copyDigest, DigestFold, xorInto } from '../../src/server/store/rules.js';

describe('anti-entropy ranges and digests', () => {
  it('splitRange follows the formula exactly, even where i·(to−from) passes 2^53', () => {
    const cases = [
      { fromTimeMs: 0, toTimeMs: 10, n: 3 },
      { fromTimeMs: 5, toTimeMs: 6, n: 4 },
      { fromTimeMs: 0, toTimeMs: Number.MAX_SAFE_INTEGER, n: 4096 },
      { fromTimeMs: 1_700_000_000_000, toTimeMs: 1_800_000_000_007, n: 313 },
    ];
    for (const { n, ...range } of cases) {
      const parts = splitRange(range, n);
      assert.equal(parts.length, n);
      const w = BigInt(range.toTimeMs - range.fromTimeMs);
      parts.forEach((p, i) => {
        assert.equal(p.fromTimeMs, Number(BigInt(range.fromTimeMs) + (BigInt(i) * w) / BigInt(n)));
        if (i > 0) assert.equal(p.fromTimeMs, parts[i - 1]!.toTimeMs, 'contiguous');
      });
      assert.equal(parts[0]!.fromTimeMs, range.fromTimeMs);
      assert.equal(parts.at(-1)!.toTimeMs, range.toTimeMs);
    }
  });

  it('DigestFold puts rows in their bucket, skips rows outside, and keeps each bucket’s time extent', () => {
    const fold = new DigestFold(splitRange({ fromTimeMs: 100, toTimeMs: 200 }, 4));
    const d = (k: string) => copyDigest(k, 1, 0);
    fold.add(50, 1, d('a')); // before the first range
    fold.add(100, 2, d('b'));
    fold.add(120, 1, d('c'));
    fold.add(174, 1, d('e'));
    fold.add(200, 1, d('f')); // at the end: outside
    const [b0, b1, b2, b3] = fold.buckets;
    assert.deepEqual(
      fold.buckets.map((b) => [b.fromTimeMs, b.toTimeMs, b.count, b.minTimeMs, b.maxTimeMs]),
      [
        [100, 125, 3, 100, 120],
        [125, 150, 0, null, null],
        [150, 175, 1, 174, 174],
        [175, 200, 0, null, null],
      ],
    );
    const xor = new Uint8Array(32);
    xorInto(xor, d('b'));
    xorInto(xor, d('c'));
    assert.deepEqual(b0!.xor, xor);
    assert.deepEqual(b1!.xor, new Uint8Array(32));
    assert.deepEqual(b2!.xor, new Uint8Array(d('e')));
    assert.deepEqual(b3!.xor, new Uint8Array(32));
  });
});
