/** Token buckets (src/server/transport/rate-limit.ts) on a hand-moved clock. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ManualClock } from '../../src/server/clock.js';
import { KeyedTokenBuckets } from '../../src/server/transport/rate-limit.js';

describe('KeyedTokenBuckets', () => {
  it('gives each key its own burst, refilled at the sustained rate', () => {
    const clock = new ManualClock();
    const buckets = new KeyedTokenBuckets({ perSecond: 0.5, burst: 3 }, clock);
    assert.deepEqual(
      [1, 2, 3, 4].map(() => buckets.take('alice')),
      [true, true, true, false],
    );
    assert.equal(buckets.take('bob'), true, 'another key has its own bucket');
    clock.advance(1999);
    assert.equal(buckets.take('alice'), false);
    clock.advance(1);
    assert.equal(buckets.take('alice'), true, 'one token every two seconds');
    assert.equal(buckets.take('alice'), false);
  });

  it('forgets a bucket once it has refilled completely, and only then', () => {
    const clock = new ManualClock();
    const buckets = new KeyedTokenBuckets({ perSecond: 1, burst: 10 }, clock);
    for (let i = 0; i < 10; i++) buckets.take('alice');
    clock.advance(5_000);
    buckets.take('bob');
    clock.advance(5_000);
    // alice untouched for 10 s (full again) is dropped; bob, used 5 s ago, is kept with what it has.
    buckets.take('carol');
    assert.equal(buckets.size, 2);
    assert.deepEqual(
      Array.from({ length: 11 }, () => buckets.take('alice')),
      [...Array<boolean>(10).fill(true), false],
      'a forgotten bucket comes back full, as it would have been',
    );
  });
});
