/**
 * RedisFanout on a real Redis: two fanouts on one key prefix are two processes of one server, each
 * with its own hub of fake sessions. The machine's Redis (fresh prefix) for fan-out and presence; a
 * Redis of the test's own for losing it.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import type { EventFrame } from '../../src/protocol/envelope.js';
import { eventFrame } from '../../src/protocol/envelope.js';
import type { ResyncHandler } from '../../src/server/cluster/fanout.js';
import { RedisFanout, shardOf, FANOUT_SHARDS } from '../../src/server/cluster/fanout.js';
import { systemClock } from '../../src/server/clock.js';
import type { LogSink } from '../../src/server/log.js';
import { createLogger } from '../../src/server/log.js';
import { Metrics } from '../../src/server/metrics.js';
import type { UserSession } from '../../src/server/sessions.js';
import { SessionHub } from '../../src/server/sessions.js';
import { parsePrometheusText } from '../helpers/prometheus.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { freshRedisPrefix, testRedisUrl } from '../helpers/test-db.js';
import { waitUntil } from '../helpers/wait.js';

interface FakeSession extends UserSession {
  readonly got: EventFrame[];
}

let seq = 0;
function fakeSession(login: string, deviceId: string): FakeSession {
  const got: EventFrame[] = [];
  return {
    id: `s${++seq}`,
    remoteAddress: '127.0.0.1',
    login,
    deviceId,
    serverLogin: null,
    challenge: null,
    got,
    send: (frame) => (got.push(frame as EventFrame), true),
    sendPaced: async (frame) => (got.push(frame as EventFrame), true),
  };
}

/** One "process": a hub, its fanout, its metrics and its log lines. */
function processOf(redisUrl: string, prefix: string, opts: { presenceTtlMs?: number } = {}) {
  const hub = new SessionHub();
  const metrics = new Metrics();
  const lines: Record<string, unknown>[] = [];
  const sink: LogSink = (l) => lines.push(JSON.parse(l) as Record<string, unknown>);
  const log = createLogger('info', sink);
  const fanout = new RedisFanout({ hub, clock: systemClock, log, metrics, redisUrl, prefix, ...opts });
  const resyncs: string[][] = [];
  const handler: ResyncHandler = async (sessions) => void resyncs.push(sessions.map((s) => s.id));
  fanout.onResync(handler);
  const open = (login: string, deviceId: string): FakeSession => {
    const s = fakeSession(login, deviceId);
    hub.add(s);
    hub.bindUser(s, login);
    return s;
  };
  const metric = async (name: string): Promise<number> => {
    const family = parsePrometheusText(await metrics.render()).get(name);
    return family?.samples.reduce((sum, s) => sum + s.value, 0) ?? 0;
  };
  return { hub, fanout, lines, resyncs, open, metric };
}

const frame = (n: number) => eventFrame('DirectMessage', { n });
const ns = (s: FakeSession) => s.got.map((f) => (f.payload as { n: number }).n);

describe('RedisFanout', () => {
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const close of closers.reverse()) await close();
  });
  const started = async (...ps: ReturnType<typeof processOf>[]) => {
    for (const p of ps) {
      closers.push(() => p.fanout.close());
      await p.fanout.start();
      assert.equal(p.fanout.connected, true);
    }
  };

  it('spreads logins over the shards', () => {
    const used = new Set(Array.from({ length: 200 }, (_, i) => shardOf(`user${i}`)));
    assert.equal(used.size, FANOUT_SHARDS);
    assert.equal(shardOf('alice'), shardOf('alice'));
  });

  it("an event reaches the owner's sessions on both processes once, except the one named", async () => {
    const prefix = freshRedisPrefix();
    const p1 = processOf(testRedisUrl(), prefix);
    const p2 = processOf(testRedisUrl(), prefix);
    const other = processOf(testRedisUrl(), freshRedisPrefix());
    await started(p1, p2, other);
    const sender = p1.open('alice', 'laptop');
    const phone = p1.open('alice', 'phone');
    const tablet = p2.open('alice', 'tablet');
    const elsewhere = other.open('alice', 'phone');
    const bob = p2.open('bob', 'phone');

    p1.fanout.sendToUser('alice', frame(1), sender.id);
    p2.fanout.sendToUser('alice', frame(2));
    await waitUntil(() => ns(phone).length === 2 && ns(tablet).length === 2, 5_000, 'both events everywhere');
    assert.deepEqual(ns(sender), [2]);
    assert.deepEqual(ns(phone).sort(), [1, 2]);
    assert.deepEqual(ns(tablet).sort(), [1, 2]);
    // The events each process received from the other, nothing of its own.
    assert.equal(await p1.metric('shine_fanout_received_total'), 1);
    assert.equal(await p2.metric('shine_fanout_received_total'), 1);
    // Another prefix is another server; another login is another user.
    p2.fanout.sendToUser('bob', frame(3));
    await waitUntil(() => ns(bob).length === 1, 5_000, 'bob');
    assert.deepEqual(ns(elsewhere), []);
    assert.deepEqual(ns(phone).sort(), [1, 2]);
  });

  it('presence: devices with a session on any process, counted sends, gone when the session ends', async () => {
    const prefix = freshRedisPrefix();
    const p1 = processOf(testRedisUrl(), prefix);
    const p2 = processOf(testRedisUrl(), prefix);
    await started(p1, p2);
    const laptop = p1.open('carol', 'laptop');
    const phone = p2.open('carol', 'phone');
    await waitUntil(async () => (await p1.fanout.onlineDevices('carol')).size === 2, 5_000, 'both devices present');
    assert.deepEqual([...(await p2.fanout.onlineDevices('carol'))].sort(), ['laptop', 'phone']);
    assert.deepEqual([...(await p2.fanout.onlineDevices('dave'))], []);

    // This process's session that took it, and the other process's open session.
    assert.equal(await p1.fanout.sendToUserCounted('carol', frame(1)), 2);
    assert.equal(await p1.fanout.sendToUserCounted('carol', frame(2), laptop.id), 1);
    await waitUntil(() => ns(phone).length === 2, 5_000, 'phone got both');

    p2.hub.remove(phone);
    await waitUntil(async () => !(await p1.fanout.onlineDevices('carol')).has('phone'), 5_000, 'phone gone');
    assert.equal(await p1.fanout.sendToUserCounted('carol', frame(3)), 1);
  });

  it('presence of a process that died expires after its TTL', async () => {
    const prefix = freshRedisPrefix();
    const live = processOf(testRedisUrl(), prefix);
    const dying = processOf(testRedisUrl(), prefix, { presenceTtlMs: 300 });
    await started(live, dying);
    const phone = dying.open('erin', 'phone');
    await waitUntil(async () => (await live.fanout.onlineDevices('erin')).has('phone'), 5_000, 'present');
    // Dies without a word (as under SIGKILL): the session is gone without the fanout hearing of it, the
    // refresh stops, and the entry stays in Redis until it expires.
    (dying.hub as unknown as { watchers: unknown[] }).watchers.length = 0;
    dying.hub.remove(phone);
    await dying.fanout.close();
    const redis = new Redis(testRedisUrl());
    try {
      assert.equal(await redis.zcard(`${prefix}presence:erin`), 1);
    } finally {
      redis.disconnect();
    }
    await waitUntil(async () => !(await live.fanout.onlineDevices('erin')).has('phone'), 5_000, 'expired');
  });

  it('losing Redis: local sessions still served, failures counted, logged once each way, resync when back', async () => {
    await using redis = await startRedisServer();
    const prefix = freshRedisPrefix();
    const p1 = processOf(redis.url, prefix);
    const p2 = processOf(redis.url, prefix);
    await started(p1, p2);
    const a1 = p1.open('frank', 'laptop');
    const a2 = p2.open('frank', 'phone');
    await waitUntil(async () => (await p1.fanout.onlineDevices('frank')).size === 2, 5_000, 'present');
    assert.equal(await p1.metric('shine_redis_up'), 1);

    await redis.stop();
    await waitUntil(() => !p1.fanout.connected && !p2.fanout.connected, 5_000, 'both notice');
    assert.equal(await p1.metric('shine_redis_up'), 0);
    p1.fanout.sendToUser('frank', frame(1));
    p1.fanout.sendToUser('frank', frame(2));
    assert.deepEqual(ns(a1), [1, 2]);
    // Push decisions fall back to this process's sessions.
    assert.deepEqual([...(await p1.fanout.onlineDevices('frank'))], ['laptop']);
    assert.equal(await p1.fanout.sendToUserCounted('frank', frame(3)), 1);
    await waitUntil(async () => (await p1.metric('shine_redis_publish_failed_total')) === 3, 5_000, 'counted');
    assert.deepEqual(ns(a2), []);

    await redis.start();
    await waitUntil(() => p1.fanout.connected && p2.fanout.connected, 10_000, 'both back');
    // Each resyncs its own sessions and asks the other to; what they replay comes from the store.
    await waitUntil(() => p1.resyncs.length >= 1 && p2.resyncs.length >= 1, 5_000, 'resyncs');
    assert.deepEqual(p1.resyncs[0], [a1.id]);
    assert.deepEqual(p2.resyncs[0], [a2.id]);
    assert.ok((await p2.metric('shine_fanout_resyncs_total')) >= 1);
    // Redis came back empty: presence is written again.
    await waitUntil(async () => (await p1.fanout.onlineDevices('frank')).size === 2, 5_000, 'present again');
    p1.fanout.sendToUser('frank', frame(4));
    await waitUntil(() => ns(a2).includes(4), 5_000, 'fan-out resumed');

    for (const p of [p1, p2]) {
      const msgs = p.lines.map((l) => String(l.msg));
      assert.equal(msgs.filter((m) => m.startsWith('Redis lost')).length, 1, msgs.join('\n'));
      assert.equal(msgs.filter((m) => m.startsWith('Redis is back')).length, 1, msgs.join('\n'));
    }
  });

  it('a Redis that hangs: the publish times out, counts as a loss, and its return brings the resync', async () => {
    await using redis = await startRedisServer();
    const prefix = freshRedisPrefix();
    const p1 = processOf(redis.url, prefix);
    const p2 = processOf(redis.url, prefix);
    await started(p1, p2);
    const a1 = p1.open('hank', 'laptop');
    const a2 = p2.open('hank', 'phone');
    redis.pause();
    try {
      p1.fanout.sendToUser('hank', frame(1));
      assert.deepEqual(ns(a1), [1]);
      // The command times out (2 s) on a connection that never closed.
      await waitUntil(() => !p1.fanout.connected, 10_000, 'p1 counts it as lost');
      assert.equal(await p1.metric('shine_redis_publish_failed_total'), 1);
    } finally {
      redis.resume();
    }
    await waitUntil(() => p1.fanout.connected, 10_000, 'p1 back');
    // p2's sessions replay what they missed (the event was never published).
    await waitUntil(() => p2.resyncs.some((ids) => ids.includes(a2.id)), 10_000, 'p2 resyncs');
    const msgs = p1.lines.map((l) => String(l.msg));
    assert.equal(msgs.filter((m) => m.startsWith('Redis lost')).length, 1, msgs.join('\n'));
    assert.equal(msgs.filter((m) => m.startsWith('Redis is back')).length, 1, msgs.join('\n'));
  });

  it('starts without Redis, serves its own sessions, and joins when Redis comes', async () => {
    await using redis = await startRedisServer();
    await redis.stop();
    const prefix = freshRedisPrefix();
    const p1 = processOf(redis.url, prefix);
    const early = new RedisFanout({
      hub: p1.hub,
      clock: systemClock,
      log: createLogger('silent'),
      metrics: new Metrics(),
      redisUrl: redis.url,
      prefix,
      startWaitMs: 100,
    });
    closers.push(() => early.close());
    await early.start();
    assert.equal(early.connected, false);
    const s = p1.open('gina', 'phone');
    early.sendToUser('gina', frame(1));
    assert.deepEqual(ns(s), [1]);
    await redis.start();
    await waitUntil(() => early.connected, 10_000, 'joined');
    assert.ok((await early.onlineDevices('gina')).has('phone'));
  });
});
