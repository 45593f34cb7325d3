/**
 * Per-login limits hold across the processes of one server (docs/protocol.md §9.2, decision 27): alice
 * sends call invites through two processes of the same server at once. Each process alone would allow
 * 30 a minute (a burst of 30, one more every 2 s); with the buckets in Redis, the two together allow
 * one burst, plus what refilled while the test ran.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ShineClientError, createIdentity } from '../../src/client/index.js';
import { CALL_LIMITS } from '../../src/server/calls/service.js';
import { startCluster } from '../helpers/cluster.js';
import { connectIdentity } from '../helpers/federated-processes.js';

const PER_PROCESS = CALL_LIMITS.invite.burst;

describe('call limits across processes of one server', () => {
  it('two processes together allow one burst of invites per login, not one each', async () => {
    await using cluster = await startCluster({ processes: 2, env: { SHINE_LOG_LEVEL: 'error' } });
    const alice = createIdentity('alice');
    const bob = createIdentity('bob');
    const [p0, p1] = cluster.processes as [(typeof cluster.processes)[0], (typeof cluster.processes)[0]];
    const bobClient = await connectIdentity(p0.wsUrl, bob, ['cluster'], 'bob-phone');
    const senders = [
      await connectIdentity(p0.wsUrl, alice, ['cluster'], 'alice-0'),
      await connectIdentity(p1.wsUrl, alice, ['cluster'], 'alice-1'),
    ];
    try {
      const started = Date.now();
      const outcomes = await Promise.all(
        senders.flatMap((client, s) =>
          Array.from({ length: PER_PROCESS }, (_, i) =>
            client
              .request('CallInviteBroadcast', {
                toLogin: 'bob',
                callId: `call-${s}-${i}`,
                payloadB64: Buffer.from('offer').toString('base64'),
              })
              .then(
                () => 'ok',
                (err: unknown) => (err instanceof ShineClientError ? err.code : String(err)),
              ),
          ),
        ),
      );
      const elapsedMs = Date.now() - started;
      const ok = outcomes.filter((o) => o === 'ok').length;
      const refilled = Math.ceil((elapsedMs / 1000) * CALL_LIMITS.invite.perSecond);
      assert.deepEqual(new Set(outcomes.filter((o) => o !== 'ok')), new Set(['RATE_LIMITED']));
      assert.ok(ok >= PER_PROCESS, `${ok} invites passed: at least one burst`);
      assert.ok(
        ok <= PER_PROCESS + refilled,
        `${ok} invites passed in ${elapsedMs} ms: one burst (${PER_PROCESS}) and ${refilled} refilled at most, not a burst per process`,
      );
    } finally {
      await Promise.all([bobClient, ...senders].map((c) => c.close()));
    }
  });
});
