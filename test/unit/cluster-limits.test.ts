/**
 * Per-login limits across processes (src/server/cluster/limits.ts) on this machine's Redis, under a
 * fresh key prefix: two ClusterLimits (two processes) share one bucket per key; without a reachable
 * Redis each falls back to its own buckets and counts it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/server/clock.js';
import { ClusterLimits } from '../../src/server/cluster/limits.js';
import { silentLogger } from '../../src/server/log.js';
import { Metrics } from '../../src/server/metrics.js';
import { freePort } from '../helpers/server-process.js';
import { freshRedisPrefix, testRedisUrl } from '../helpers/test-db.js';

const LIMIT = { perSecond: 0.5, burst: 3 };

/** The value of an unlabelled series in a Prometheus text, or null when absent. */
function seriesValue(text: string, name: string): number | null {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

describe('ClusterLimits', () => {
  const prefix = freshRedisPrefix();
  const clients: Redis[] = [];
  const connect = async (url: string): Promise<Redis> => {
    const redis = new Redis(url, { enableOfflineQueue: false, commandTimeout: 1_000, maxRetriesPerRequest: 0 });
    redis.on('error', () => undefined);
    clients.push(redis);
    return redis;
  };
  let admin: Redis;

  before(async () => {
    admin = new Redis(testRedisUrl());
    clients.push(admin);
  });
  after(async () => {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    for (const c of clients) c.disconnect();
  });

  it('two processes share one bucket per key, refilled at the sustained rate', async () => {
    const clock = new ManualClock();
    const [r1, r2] = [await connect(testRedisUrl()), await connect(testRedisUrl())];
    await Promise.all(
      [r1, r2].map((r) => new Promise((ok) => (r.status === 'ready' ? ok(null) : r.once('ready', ok)))),
    );
    const make = (redis: Redis) =>
      new ClusterLimits({ clock, log: silentLogger, metrics: new Metrics(), redis, prefix }).limiter('invite', LIMIT);
    const [p1, p2] = [make(r1), make(r2)];
    const taken = [await p1.take('alice'), await p2.take('alice'), await p1.take('alice'), await p2.take('alice')];
    assert.deepEqual(taken, [true, true, true, false], 'one burst of 3 across both processes, not 3 each');
    assert.equal(await p2.take('bob'), true, 'another key has its own bucket');
    clock.advance(1_999);
    assert.equal(await p1.take('alice'), false);
    clock.advance(1);
    assert.equal(await p2.take('alice'), true, 'one token every two seconds, for either process');
    assert.equal(await p1.take('alice'), false);
    const keys = (await admin.keys(`${prefix}*`)).sort();
    assert.deepEqual(keys, [`${prefix}limit:invite:alice`, `${prefix}limit:invite:bob`], 'keys under the prefix');
    const ttl = await admin.pttl(`${prefix}limit:invite:alice`);
    assert.ok(ttl > 0 && ttl <= 7_000, `a bucket expires once it would be full again (pttl ${ttl})`);
  });

  it('while Redis cannot be reached, each process uses its own buckets and counts the fallback', async () => {
    const clock = new ManualClock();
    const down = await connect(`redis://127.0.0.1:${await freePort()}`);
    const metrics = new Metrics();
    const limiter = new ClusterLimits({ clock, log: silentLogger, metrics, redis: down, prefix }).limiter(
      'invite',
      LIMIT,
    );
    const taken = [];
    for (let i = 0; i < 4; i++) taken.push(await limiter.take('carol'));
    assert.deepEqual(taken, [true, true, true, false], 'the local bucket still limits');
    assert.equal(seriesValue(await metrics.render(), 'shine_limits_redis_fallbacks_total'), 4);
    assert.deepEqual(await admin.keys(`${prefix}limit:invite:carol`), [], 'nothing reached Redis');
  });

  it('without Redis the limits are per process, and no fallback is counted', async () => {
    const metrics = new Metrics();
    const limiter = new ClusterLimits({
      clock: new ManualClock(),
      log: silentLogger,
      metrics,
      redis: null,
      prefix,
    }).limiter('signal', LIMIT);
    assert.equal(await limiter.take('dave'), true);
    assert.equal(seriesValue(await metrics.render(), 'shine_limits_redis_fallbacks_total'), 0);
  });
});
