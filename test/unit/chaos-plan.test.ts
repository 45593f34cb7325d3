/** The chaos run's fault plan (test/helpers/chaos.ts): a function of the seed alone, so a seed replays a run. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planFaults, prng } from '../helpers/chaos.js';

describe('chaos fault plan', () => {
  it('is the same for the same seed and differs for another', () => {
    assert.deepEqual(planFaults(42, 300), planFaults(42, 300));
    assert.notDeepEqual(planFaults(42, 300), planFaults(43, 300));
    assert.deepEqual(Array.from({ length: 3 }, prng(7)), Array.from({ length: 3 }, prng(7)));
  });

  it('kills and wipes (once per started minute) on one track, cuts links on the other, hits every server, ends before the run does', () => {
    for (let seed = 1; seed <= 50; seed++) {
      for (const seconds of [20, 300]) {
        const plan = planFaults(seed, seconds);
        assert.ok(
          plan.some((f) => f.kind === 'kill'),
          `seed ${seed}: a kill`,
        );
        assert.ok(plan.filter((f) => f.kind === 'emptyDb').length >= 1, `seed ${seed}: an empty-database restart`);
        if (seconds === 300) {
          assert.equal(plan.filter((f) => f.kind === 'emptyDb').length, 5, `seed ${seed}: one wipe a minute`);
          assert.deepEqual([...new Set(plan.map((f) => f.server))].sort(), [0, 1, 2, 3], `seed ${seed}: every server`);
        }
        for (const [i, f] of plan.entries()) {
          assert.ok(f.atMs + f.forMs < seconds * 1000, `seed ${seed}: fault ${i} ends within the run`);
          const before = plan
            .slice(0, i)
            .filter((x) => x.track === f.track)
            .at(-1);
          if (before) assert.ok(f.atMs >= before.atMs + before.forMs, `seed ${seed}: one fault at a time on a track`);
          assert.equal(f.track, f.kind === 'kill' || f.kind === 'emptyDb' ? 0 : 1);
          if (i > 0) assert.ok(f.atMs >= plan[i - 1]!.atMs, `seed ${seed}: sorted`);
        }
      }
    }
  });
});
