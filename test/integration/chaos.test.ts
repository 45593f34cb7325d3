/**
 * The chaos run (test/helpers/chaos.ts, docs/reliability.md): four server processes, a seeded driver and
 * fault injector, then the invariant checker over every database. Short here (CHAOS_SECONDS, default 20);
 * `npm run chaos` runs it for 5 minutes. CHAOS_SEED=<n> replays a run's faults.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runChaos, startChaosNetwork } from '../helpers/chaos.js';

const seconds = Number(process.env.CHAOS_SECONDS ?? 20);
const seed =
  process.env.CHAOS_SEED !== undefined ? Number(process.env.CHAOS_SEED) : Math.floor(Math.random() * 2 ** 31);

describe('chaos', () => {
  it(
    `kills, partitions, delays and an empty-database restart lose nothing and duplicate nothing (CHAOS_SEED=${seed})`,
    { timeout: (seconds + 180) * 1000 },
    async () => {
      console.error(`chaos: CHAOS_SEED=${seed} CHAOS_SECONDS=${seconds}`);
      const net = await startChaosNetwork();
      try {
        const report = await runChaos(net, seed, seconds, (line) => console.error(line));
        const { plan: _plan, ...summary } = report;
        console.error(`chaos: report ${JSON.stringify(summary)}`);
        assert.ok(report.injected.kill > 0 && report.injected.emptyDb > 0, 'the plan killed and wiped a server');
        assert.ok(report.driven.sends200 > 0, 'some sends were answered 200');
        assert.deepEqual(report.violations, [], `violations (CHAOS_SEED=${seed} reproduces)`);
      } finally {
        await net.close();
      }
    },
  );
});
