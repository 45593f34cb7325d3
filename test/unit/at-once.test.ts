import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { eachAtOnce } from '../../src/server/at-once.js';
import { gate } from '../helpers/gate.js';

describe('eachAtOnce', () => {
  it('runs at most `limit` items at once, in order, and every item once', async () => {
    let running = 0;
    let most = 0;
    const started: number[] = [];
    await eachAtOnce(
      Array.from({ length: 20 }, (_, i) => i),
      3,
      async (i) => {
        started.push(i);
        most = Math.max(most, ++running);
        await new Promise((r) => setImmediate(r));
        running--;
      },
    );
    assert.equal(most, 3, 'three at once');
    assert.deepEqual(
      started,
      Array.from({ length: 20 }, (_, i) => i),
    );
  });

  it('starts no item once stop() is true', async () => {
    const seen: number[] = [];
    await eachAtOnce(
      [0, 1, 2, 3, 4, 5],
      2,
      async (i) => void seen.push(i),
      () => seen.includes(2),
    );
    assert.deepEqual(seen, [0, 1, 2], JSON.stringify(seen));
  });

  it('the first failure starts no more items, waits for those under way, then is thrown', async () => {
    const slow = gate();
    const seen: number[] = [];
    let slowEnded = false;
    const run = eachAtOnce([0, 1, 2, 3, 4], 2, async (i) => {
      seen.push(i);
      if (i === 0) {
        await slow.promise;
        slowEnded = true;
      }
      if (i === 1) throw new Error('item 1 failed');
      if (i === 2) throw new Error('item 2 failed');
    });
    let settled = false;
    void run.catch(() => {}).finally(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(settled, false, 'not thrown while item 0 is still under way');
    slow.open();
    await assert.rejects(run, /item 1 failed/);
    assert.ok(slowEnded, 'item 0 ended before the error was thrown');
    assert.deepEqual(seen, [0, 1], 'no item started after the failure');
  });
});
