/**
 * What operators see (issue 8, test e): GET /metrics read by a strict text-format parser and checked
 * against known traffic, and the whole log of a federated run (two servers, messages both ways,
 * settings, a replication cycle) scanned for every blob, setting value, signature and seed sent.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { OpResults } from '../../src/protocol/ops.js';
import { createLogger } from '../../src/server/log.js';
import { FAST, adminSync, directMessageEvent, sendPair, textPair } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import type { MetricFamily } from '../helpers/prometheus.js';
import { scrape } from '../helpers/prometheus.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { TestUser } from '../helpers/users.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { makeSubscriptionKeys, startPushEndpoint } from '../helpers/push-endpoint.js';
import { waitUntil } from '../helpers/wait.js';
import { suiteConcurrency } from '../helpers/test-db.js';

/** The value of the one sample of `name` whose labels are exactly `labels` (0 when absent). */
function valueOf(families: Map<string, MetricFamily>, name: string, labels: Record<string, string> = {}): number {
  const want = JSON.stringify(Object.entries(labels).sort());
  for (const family of families.values()) {
    const s = family.samples.find((x) => x.name === name && JSON.stringify(Object.entries(x.labels).sort()) === want);
    if (s) return s.value;
  }
  return 0;
}

describe('observability: /metrics and logs', { concurrency: suiteConcurrency() }, () => {
  it('/metrics is strict Prometheus text; ops are counted per server exactly; process metrics are there', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha' }, { serverLogin: 'beta' }] });
    const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    await using ca = await connectUser(alpha.wsUrl, alice);
    await using cb = await connectUser(alpha.wsUrl, bob);

    const N = 7;
    for (let i = 0; i < N; i++) await sendPair(ca, textPair(alice, 'bob'));
    const refused = await ca.request('SendMessagePair', { incomingBlobB64: 'AAAA', outgoingBlobB64: 'AAAA' });
    assert.equal(refused.status, 400);
    await cb.call('GetDirectMessages', { peerLogin: 'alice', limit: 10 });

    const m = await scrape(alpha.httpUrl);
    assert.equal(m.get('shine_ops_total')?.type, 'counter');
    assert.equal(valueOf(m, 'shine_ops_total', { op: 'SendMessagePair', status: '200' }), N);
    assert.equal(valueOf(m, 'shine_ops_total', { op: 'SendMessagePair', status: '400' }), 1);
    assert.equal(valueOf(m, 'shine_ops_total', { op: 'AuthLogin', status: '200' }), 2);
    assert.equal(valueOf(m, 'shine_ops_total', { op: 'GetDirectMessages', status: '200' }), 1);
    assert.equal(m.get('shine_op_duration_seconds')?.type, 'histogram');
    assert.equal(valueOf(m, 'shine_op_duration_seconds_count', { op: 'SendMessagePair' }), N + 1);
    assert.equal(valueOf(m, 'shine_sessions_open'), 2);

    // prom-client's default metrics, under their usual names.
    const expected: [string, MetricFamily['type']][] = [
      ['process_cpu_user_seconds_total', 'counter'],
      ['process_start_time_seconds', 'gauge'],
      ['process_resident_memory_bytes', 'gauge'],
      ['nodejs_eventloop_lag_seconds', 'gauge'],
      ['nodejs_eventloop_lag_p99_seconds', 'gauge'],
      ['nodejs_heap_size_used_bytes', 'gauge'],
      ['nodejs_gc_duration_seconds', 'histogram'],
      ['nodejs_active_handles_total', 'gauge'],
      ['nodejs_version_info', 'gauge'],
    ];
    for (const [name, type] of expected) assert.equal(m.get(name)?.type, type, `${name} is a ${type}`);
    assert.ok(valueOf(m, 'nodejs_heap_size_used_bytes') > 0);
    assert.ok(valueOf(m, 'nodejs_active_handles_total') > 0, 'the listening socket at least');

    // Two servers in one process: beta's registry saw none of alpha's traffic.
    const b = await scrape(beta.httpUrl);
    assert.equal(valueOf(b, 'shine_ops_total', { op: 'SendMessagePair', status: '200' }), 0);
    assert.equal(valueOf(b, 'shine_sessions_open'), 0);
  });

  it('the log of a federated run holds no blob, setting value, signature, seed, call payload or push endpoint', async () => {
    const lines: string[] = [];
    const logTo = (self: string) => createLogger('debug', (l) => lines.push(l), { self });
    await using endpoint = await startPushEndpoint();
    await using net = await startNetwork({
      federate: true,
      servers: [
        { serverLogin: 'alpha', ...FAST, log: logTo('alpha'), webPushAllowInsecure: '1' },
        { serverLogin: 'beta', ...FAST, log: logTo('beta'), webPushAllowInsecure: '1' },
      ],
    });
    const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
    // alice is served by both servers, so a replication cycle has her data to move.
    const alice = makeUser('alice', ['alpha', 'beta']);
    const bob = makeUser('bob', ['beta']);
    await using aliceA = await connectUser(alpha.wsUrl, alice, 'alice-laptop');
    await using aliceB = await connectUser(beta.wsUrl, alice, 'alice-phone');
    await using bobB = await connectUser(beta.wsUrl, bob, 'bob-phone');

    const secrets = new Set<string>();
    // bob's tablet has no open session: every message and call to bob is pushed to it.
    const token = `push-token-${randomBytes(12).toString('hex')}`;
    const tabletKeys = makeSubscriptionKeys();
    await bobB.call('UpsertPushToken', {
      deviceId: 'bob-tablet',
      endpoint: `${endpoint.origin}/${token}`,
      p256dhB64: tabletKeys.p256dhB64,
      authB64: tabletKeys.authB64,
    });
    for (const s of [token, tabletKeys.p256dhB64, tabletKeys.authB64]) secrets.add(s);
    /** Three pairs from one user to the other, each awaited until the recipient's session has it. */
    const converse = async (from: TestUser, fromClient: RawClient, to: TestUser, toClient: RawClient) => {
      for (let i = 0; i < 3; i++) {
        const body = `${from.login}-to-${to.login}-${i}-${randomBytes(8).toString('hex')}`;
        const pair = textPair(from, to.login, { body });
        for (const s of [pair.incomingBlobB64, pair.outgoingBlobB64, body]) secrets.add(s);
        for (const c of [pair.incoming, pair.outgoing]) secrets.add(toBase64(c.signature));
        const got = directMessageEvent(toClient, pair.incomingKey);
        await sendPair(fromClient, pair);
        await got;
      }
    };
    await converse(alice, aliceA, bob, bobB);
    await converse(bob, bobB, alice, aliceA);
    const callPayload = toBase64(randomBytes(40));
    secrets.add(callPayload);
    await aliceA.call('CallInviteBroadcast', { toLogin: 'bob', callId: 'call-1', payloadB64: callPayload });
    await aliceA.call('CallSignal', { toLogin: 'bob', callId: 'call-1', kind: 'hangup', payloadB64: callPayload });
    // Three messages and one call invite: the push path ran, so the scan below covers its logging too.
    await waitUntil(() => endpoint.to(`/${token}`).length >= 4, 10_000, 'pushes to bob-tablet');
    const valueB64 = toBase64(randomBytes(48));
    secrets.add(valueB64);
    await aliceA.call('SetUserSetting', { key: 'theme', valueB64, updatedAtMs: Date.now() });
    const cycle = await adminSync(beta);
    assert.equal(cycle.errors, 0);
    const settings = await aliceB.call<OpResults['GetUserSettings']>('GetUserSettings', { keys: ['theme'] });
    assert.deepEqual(
      settings.items.map((s) => s.valueB64),
      [valueB64],
      'the setting reached beta by sync',
    );
    for (const user of [alice, bob]) {
      secrets.add(user.profile.signatureB64);
      secrets.add(toBase64(user.seed));
    }
    await net.close();

    // The log is the real thing: JSON lines from both servers, per-request entries with their ids.
    const entries = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(new Set(entries.map((e) => e.self)), new Set(['alpha', 'beta']));
    assert.ok(entries.every((e) => typeof e.time === 'string' && typeof e.msg === 'string' && e.level));
    const loggedIn = entries.filter((e) => e.msg === 'user logged in');
    assert.equal(loggedIn.length, 3);
    for (const e of loggedIn) {
      assert.equal(e.op, 'AuthLogin');
      assert.equal(typeof e.requestId, 'string');
      assert.equal(typeof e.sessionId, 'string');
    }
    assert.ok(entries.some((e) => e.msg === 'sync cycle done'));

    const log = lines.join('\n');
    assert.ok(secrets.size >= 6 * 5 + 1 + 4);
    for (const s of secrets) assert.ok(!log.includes(s), `the log holds ${s.slice(0, 24)}…`);
  });
});
