/**
 * Fault test: the recipient's server hangs (SIGSTOP) instead of dying. Its host still completes TCP
 * handshakes, but nothing answers: a call in flight gets no answer, the heartbeat finds the silent
 * connection, and every redial hangs until its handshake times out — the case of a host that drops
 * packets, where a dial waits rather than being refused (docs/protocol.md §6.2, decisions 52–54).
 *
 * Two real `shine serve` processes on loopback: A (`alpha`: alice and carol) and B (`beta`: bob),
 * SHINE_S2S_TIMEOUT_MS 2 s. The retry schedule's second attempt is two minutes after the first, so a
 * delivery within the test's waits after B resumes is the wake-up at B's return, not a retry.
 *
 * Checked: while B is stopped every send to bob is answered `accepted` (never an error), A counts B down
 * from the moment its heartbeat drops the silent connection (not only once a redial has timed out), sends
 * to carol on A go on being `delivered`; after SIGCONT every pair ends
 * `delivered` without a retry, bob holds each message once and his live session got each once — also
 * the one whose call sat unread in B's socket while it was stopped and was read after it resumed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ShineClient } from '../../src/client/index.js';
import { createIdentity } from '../../src/client/index.js';
import type { DeliveryRow } from '../../src/server/store/types.js';
import {
  adminGet,
  connectIdentity,
  metricSum,
  startFederatedProcesses,
  warmUp,
  wholeHistory,
} from '../helpers/federated-processes.js';
import type { ServerProcess } from '../helpers/server-process.js';
import { waitUntil } from '../helpers/wait.js';

const S2S_TIMEOUT_MS = 2000;
/** Pairs sent to bob in each phase of the freeze, four in flight. */
const PER_PHASE = 12;

interface PeerRow {
  serverLogin: string;
  connected: boolean;
  down: boolean;
}

const betaSeen = async (a: ServerProcess): Promise<PeerRow> =>
  (await adminGet<{ peers: PeerRow[] }>(a, '/debug/peers')).peers.find((p) => p.serverLogin === 'beta')!;

describe('the recipient server frozen with SIGSTOP, then resumed', () => {
  let a: ServerProcess;
  let b: ServerProcess;
  let frozen = false;
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');
  const carol = createIdentity('carol');
  const clients: ShineClient[] = [];

  before(async () => {
    [a, b] = (await startFederatedProcesses([{ serverLogin: 'alpha' }, { serverLogin: 'beta' }], {
      SHINE_RETRY_SCHEDULE_MS: '0,120000,240000',
      SHINE_WORKER_TICK_MS: '50',
      SHINE_S2S_TIMEOUT_MS: String(S2S_TIMEOUT_MS),
    })) as [ServerProcess, ServerProcess];
  });
  after(async () => {
    if (frozen) process.kill(b.pid, 'SIGCONT');
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all([a?.close(), b?.close()]);
  });

  it('sends are answered while it hangs, and all are delivered once at its return, by the wake-up', async (t) => {
    const bobOnB = await connectIdentity(b.wsUrl, bob, ['beta'], 'bob-phone');
    const aliceOnA = await connectIdentity(a.wsUrl, alice, ['alpha'], 'alice-phone');
    const carolOnA = await connectIdentity(a.wsUrl, carol, ['alpha'], 'carol-phone');
    clients.push(bobOnB, aliceOnA, carolOnA);
    const bobEvents: string[] = [];
    bobOnB.on('DirectMessage', (e) => bobEvents.push(e.messageKey));
    await warmUp(aliceOnA, 'bob');
    await warmUp(aliceOnA, 'carol');
    assert.equal((await betaSeen(a)).connected, true, 'alpha holds a connection to beta before the freeze');

    /** Sends PER_PHASE pairs to bob, four in flight, and one to carol after each; returns bob's answers. */
    const phase = async (name: string): Promise<{ key: string; state: string; ms: number }[]> => {
      const answers: { key: string; state: string; ms: number }[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = next++; i < PER_PHASE; i = next++) {
            const t0 = Date.now();
            const sent = await aliceOnA.sendText('bob', `${name} ${i}`);
            answers.push({ key: sent.incomingKey, state: sent.deliveryState, ms: Date.now() - t0 });
            const local = await aliceOnA.sendText('carol', `${name} ${i} to carol`);
            assert.equal(local.deliveryState, 'delivered', 'a send to a user on alpha is not held up by beta');
          }
        }),
      );
      return answers;
    };

    process.kill(b.pid, 'SIGSTOP');
    frozen = true;
    // The first calls go on the open connection and sit unread in beta's socket, until the heartbeat drops
    // the silent connection; the background redial then hangs until its handshake times out.
    let atDrop: PeerRow | null = null;
    const dropped = waitUntil(
      async () => !(atDrop = await betaSeen(a)).connected,
      4 * S2S_TIMEOUT_MS,
      'alpha drops the silent connection',
    );
    dropped.catch(() => {}); // awaited below; a failure of the sends first must not leave it unhandled
    const first = await phase('frozen');
    await dropped;
    assert.equal(
      atDrop!.down,
      true,
      'beta is down as soon as its connection is dropped for silence, not only once the redial has timed out',
    );
    // Beta is known down: these answers do not wait for a call.
    const second = await phase('down');
    for (const { state } of [...first, ...second]) assert.equal(state, 'accepted', 'beta is stopped: accepted');
    assert.equal((await betaSeen(a)).down, true, 'beta is still down');
    const attemptsBefore = await metricSum(a.httpUrl, 'shine_delivery_attempts_total');

    const resumedAt = Date.now();
    process.kill(b.pid, 'SIGCONT');
    frozen = false;
    const sent = [...first, ...second].map((s) => s.key);
    // The next regular retry is two minutes away: only the wake-up at beta's return delivers within this wait.
    await waitUntil(
      async () =>
        (await adminGet<{ rows: DeliveryRow[] }>(a, '/debug/delivery?state=accepted&limit=1000')).rows.length === 0,
      30_000,
      'every pair delivered after beta resumed',
    );
    const allDeliveredMs = Date.now() - resumedAt;
    await waitUntil(() => sent.every((k) => bobEvents.includes(k)), 10_000, "every message reached bob's session");

    const aliceItems = (await wholeHistory(aliceOnA, 'bob')).filter((i) => i.messageType === 2);
    const states = new Map(aliceItems.map((i) => [i.messageKey.replace(/\|2$/, '|1'), i.deliveryState]));
    assert.deepEqual(
      sent.filter((k) => states.get(k) !== 'delivered'),
      [],
      'every pair is delivered on alpha',
    );
    const bobKeys = (await wholeHistory(bobOnB, 'alice')).map((i) => i.messageKey);
    assert.equal(new Set(bobKeys).size, bobKeys.length, 'bob holds each message once');
    assert.deepEqual(
      sent.filter((k) => !bobKeys.includes(k)),
      [],
      'bob holds every message',
    );
    assert.equal(new Set(bobEvents).size, bobEvents.length, "bob's session got each message once");
    const received = await metricSum(b.httpUrl, 'shine_ops_total', { op: 'ReceiveIncomingMessage', status: '200' });
    assert.ok(
      received > sent.length + 1,
      `the calls that sat unread in beta's socket were read after it resumed, and stored nothing twice (${received} calls)`,
    );
    const failed = await adminGet<{ rows: DeliveryRow[] }>(a, '/debug/delivery?state=failed&limit=1000');
    assert.equal(failed.rows.length, 0, 'nothing failed');

    const slowest = (xs: { ms: number }[]): number => Math.max(...xs.map((x) => x.ms));
    t.diagnostic(
      `slowest answer while frozen ${slowest(first)} ms, once beta was known down ${slowest(second)} ms; ` +
        `all delivered ${allDeliveredMs} ms after SIGCONT; worker attempts during the freeze ${attemptsBefore}, ` +
        `after ${(await metricSum(a.httpUrl, 'shine_delivery_attempts_total')) - attemptsBefore}; ` +
        `ReceiveIncomingMessage answered by beta ${received} for ${sent.length + 1} messages`,
    );
  });
});
