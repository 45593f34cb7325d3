/**
 * The replication cycle under the server-wide lock (docs/protocol.md §9.2, decision 27): a periodic
 * cycle while another process holds the lock is skipped and counted; POST /admin/sync (runCycle) waits
 * for the lock and then runs a cycle of its own. The lock is a stand-in for the processes area that
 * another process holds or not; the server has no peer servers (a cycle with nothing to pull).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BackgroundQueue } from '../../src/server/background/queue.js';
import { ManualClock, systemClock } from '../../src/server/clock.js';
import type { Clock } from '../../src/server/clock.js';
import { resolveConfig } from '../../src/server/config/config.js';
import { silentLogger } from '../../src/server/log.js';
import { Metrics } from '../../src/server/metrics.js';
import type { ReplicationDeps } from '../../src/server/replication/service.js';
import { ReplicationService } from '../../src/server/replication/service.js';
import type { ProcessStore, Store } from '../../src/server/store/types.js';
import { waitUntil } from '../helpers/wait.js';

/** The replication lock as another process holds it or not. */
class Lock implements Pick<ProcessStore, 'exclusively'> {
  heldElsewhere = false;
  asked = 0;
  async exclusively(name: string, fn: () => Promise<void>): Promise<boolean> {
    assert.equal(name, 'replication');
    this.asked++;
    if (this.heldElsewhere) return false;
    await fn();
    return true;
  }
}

function service(lock: Lock, clock: Clock, metrics = new Metrics()): ReplicationService {
  const deps = {
    config: resolveConfig({ serverLogin: 'alpha', syncIntervalMs: 1_000 }),
    clock,
    store: { processes: lock, directory: { peerServersOf: async () => [] } } as unknown as Store,
    log: silentLogger,
    metrics,
    background: new BackgroundQueue(silentLogger),
  } as Partial<ReplicationDeps> as ReplicationDeps;
  return new ReplicationService(deps);
}

const skippedOf = async (metrics: Metrics): Promise<number> =>
  Number(/^shine_sync_cycles_skipped_total (\S+)$/m.exec(await metrics.render())?.[1]);

describe('replication cycle under the server-wide lock', () => {
  it('a periodic cycle is skipped and counted while another process holds the lock', async () => {
    const lock = new Lock();
    const clock = new ManualClock();
    const metrics = new Metrics();
    const replication = service(lock, clock, metrics);
    assert.equal(await skippedOf(metrics), 0, 'the counter exists from the start');
    lock.heldElsewhere = true;
    replication.start();
    assert.equal(await replication.tryCycle(), null, 'skipped');
    await waitUntil(async () => (await skippedOf(metrics)) === 1, 2_000, 'the start-up cycle counted as skipped');
    lock.heldElsewhere = false;
    clock.advance(1_000);
    await waitUntil(() => replication.lastCycle !== null, 2_000, 'the next periodic cycle ran');
    assert.equal(await skippedOf(metrics), 1);
    replication.close();
  });

  it('POST /admin/sync waits while another process holds the lock, then runs its own cycle', async () => {
    const lock = new Lock();
    lock.heldElsewhere = true;
    const replication = service(lock, systemClock);
    let answered = false;
    const request = replication.runCycle().then((summary) => {
      answered = true;
      return summary;
    });
    await waitUntil(() => lock.asked >= 2, 2_000, 'the lock asked for again');
    assert.equal(answered, false, 'no answer while the other process runs its cycle');
    lock.heldElsewhere = false;
    // The retry timer does not hold the event loop open (unref): wait on the answer itself.
    await waitUntil(() => answered, 2_000, 'the answer');
    const summary = await request;
    assert.deepEqual(
      { ...summary, durationMs: 0 },
      {
        peers: 0,
        users: 0,
        dmRows: 0,
        settingsRows: 0,
        repairedCopies: 0,
        chainBlocksPulled: 0,
        chainResyncs: 0,
        errors: 0,
        durationMs: 0,
      },
    );
    assert.ok(replication.lastCycle, 'a cycle of its own ran');
  });
});
