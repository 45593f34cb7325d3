/**
 * Healing right after a partition (docs/protocol.md §7, "After a partition"): alice on alpha1 + alpha2,
 * the two cut apart by relays while alice sends on alpha1, so the pairs cannot be forwarded to alpha2.
 * Once the relays heal, alpha2 holds every pair within SHINE_SYNC_ON_RETURN_MS plus one cycle, with no
 * manual sync and the six-hour cycle far off.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startNetwork } from '../helpers/network.js';
import { dmSnapshot, metricValue, pairOf, replicationServer, seedFor, sendAll } from '../helpers/replication.js';
import { freePort } from '../helpers/server-process.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';

const SYNC_ON_RETURN_MS = 2_000;
/** The call timeout, which also caps the background redial's backoff: the return is seen this soon. */
const S2S_TIMEOUT_MS = 2_000;
/** A generous bound on one cycle of this size on a busy machine. */
const CYCLE_BOUND_MS = 8_000;

describe('replication: a partition between a user’s two servers heals by itself', () => {
  it('e) pairs sent during the partition reach alpha2 within SHINE_SYNC_ON_RETURN_MS plus one cycle of healing', async () => {
    const [p1, p2, pb] = await Promise.all([freePort(), freePort(), freePort()]);
    await using relay1 = await startWsProxy(`ws://127.0.0.1:${p1}/ws`);
    await using relay2 = await startWsProxy(`ws://127.0.0.1:${p2}/ws`);
    const peers = (...entries: [string, number][]) =>
      entries.map(([name, port]) => `${name}=ws://127.0.0.1:${port}/ws`).join(',');
    const common = { syncOnReturnMs: SYNC_ON_RETURN_MS, s2sTimeoutMs: S2S_TIMEOUT_MS };
    // Descriptors are fetched directly (SHINE_PEERS); calls go where they point: alpha1 and alpha2 through the relays.
    await using net = await startNetwork({
      servers: [
        replicationServer('alpha1', {
          ...common,
          port: p1,
          publicWsUrl: relay1.wsUrl,
          peers: peers(['alpha2', p2], ['bravo', pb]),
        }),
        replicationServer('alpha2', {
          ...common,
          port: p2,
          publicWsUrl: relay2.wsUrl,
          peers: peers(['alpha1', p1], ['bravo', pb]),
        }),
        replicationServer('bravo', { ...common, port: pb, peers: peers(['alpha1', p1], ['alpha2', p2]) }),
      ],
    });
    const [A1, A2, B] = [net.servers[0]!, net.servers[1]!, net.servers[2]!];
    const alice = makeUser('alice', ['alpha1', 'alpha2'], seedFor('alice'));
    const bob = makeUser('bob', ['bravo'], seedFor('bob'));
    await (await connectUser(A2.wsUrl, alice, 'alice-a2')).close();
    await (await connectUser(B.wsUrl, bob, 'bob-b')).close();
    await using aliceA1 = await connectUser(A1.wsUrl, alice, 'alice-a1');
    // alice's copies: the outgoing copy of each pair she sent.
    const copiesOnA2 = async () => (await dmSnapshot(A2, 'alice')).copies.length;

    // Before the partition the pair is forwarded to alpha2 at once.
    const base = Date.now() - 60_000;
    const ref = (i: number) => ({ from: 'alice', to: 'bob', timeMs: base + i, nonce: i });
    await sendAll(aliceA1, [{ pair: pairOf(ref(0)) }]);
    await waitUntil(async () => (await copiesOnA2()) === 1, 10_000, 'the first pair forwarded to alpha2');
    const cyclesBefore = await metricValue(A2.httpUrl, 'sync_cycles_total', 'result="ok"');

    relay1.cut();
    relay2.cut();
    const during = await sendAll(
      aliceA1,
      Array.from({ length: 20 }, (_, i) => ({ pair: pairOf(ref(1 + i)) })),
    );
    assert.ok(
      during.every((a) => a.deliveryState === 'delivered'),
      'bob’s server is not cut off',
    );
    await A1.drain(); // the forwards to alpha2 ran and failed
    assert.equal(await copiesOnA2(), 1, 'nothing crossed the partition');

    const healedAt = Date.now();
    relay1.heal();
    relay2.heal();
    await waitUntil(
      async () => (await copiesOnA2()) === 21,
      S2S_TIMEOUT_MS + SYNC_ON_RETURN_MS + CYCLE_BOUND_MS,
      'every pair on alpha2 without a manual sync',
    );
    const healedInMs = Date.now() - healedAt;
    assert.deepEqual((await dmSnapshot(A2, 'alice')).copies, (await dmSnapshot(A1, 'alice')).copies);
    // The cycle stores the rows before its repair step and counts itself only at its end: wait for the count.
    await waitUntil(
      async () => (await metricValue(A2.httpUrl, 'sync_cycles_total', 'result="ok"')) > cyclesBefore,
      CYCLE_BOUND_MS,
      'a cycle did it, and finished without errors',
    );
    console.log(JSON.stringify({ test: 'partition healed', pairs: 20, healedInMs, syncOnReturnMs: SYNC_ON_RETURN_MS }));
  });
});
