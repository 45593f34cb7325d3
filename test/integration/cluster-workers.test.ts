/**
 * Issue 11 (d): the delivery worker runs in every process of one server, and no attempt runs twice
 * (docs/protocol.md §6.6, §9.2: rows claimed by lease + row-version compare-and-set).
 *
 * Setup, all real: a cluster of three `shine serve` processes of `cluster` on one database (PostgreSQL;
 * SHINE_CLUSTER_DB=sqlite shares one SQLite file instead), each with its own worker ticking every
 * 100 ms, and bob's server `beta` behind a WebSocket relay that shows the test every frame the cluster
 * sends it. One warm-up pair makes each side know the other (bob's profile on the cluster, alice's and
 * the cluster's descriptor on beta). Then beta stops, and alice sends ROWS pairs through the three
 * processes: each first attempt fails (beta is down), so every row waits `accepted` for its next
 * offset, a few seconds later. Beta comes back on the same port and data, and from then on the relay
 * counts each ReceiveIncomingMessage it passes, by the copy it carries. The rows come due within the
 * few seconds the sends took, and all three workers race for them.
 *
 * Checked: every row ends `delivered`; each of the ROWS copies reached beta exactly once (beyond that,
 * at most one more per call that timed out at the cluster yet reached beta — a new attempt of a row,
 * not the same attempt twice — and one per probe, the call a process makes on its own to a server that
 * timed out, `shine_delivery_probes_total`; on an idle machine there is none); beta answered as many
 * calls as the relay passed; every worker took part; bob's history on beta holds each message once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ShineClient } from '../../src/client/index.js';
import { createIdentity, textPair } from '../../src/client/index.js';
import type { Cluster, ClusterBesideBeta } from '../helpers/cluster.js';
import { startClusterBesideBeta } from '../helpers/cluster.js';
import { connectIdentity, metricSum, warmUp, wholeHistory } from '../helpers/federated-processes.js';
import type { ServerProcess } from '../helpers/server-process.js';
import { configFileWith } from '../helpers/server-process.js';
import { metricSumOver } from '../helpers/metrics.js';
import { waitUntil } from '../helpers/wait.js';
import type { WsProxy } from '../helpers/ws-proxy.js';

/** Several times the attempts the three workers run at once (3 × 32), so they race for the rows throughout. */
const ROWS = 400;
const PROCESSES = 3;
/** Requests each of alice's sessions keeps in flight. */
const WINDOW = 16;
const TOKEN = 'cluster-workers-token';
/**
 * First attempt at once, then one every two seconds from 4 s to 2 min (beta is back long before), then an
 * hour. Every second, the failing attempts while beta restarts slowed its start-up on a busy machine.
 */
const SCHEDULE = [0, ...Array.from({ length: 59 }, (_, i) => 4_000 + i * 2_000), 3_600_000].join(',');

describe('delivery workers of three processes of one server', () => {
  let setup: ClusterBesideBeta | undefined;
  let cluster: Cluster;
  let beta: ServerProcess;
  let relay: WsProxy;
  const clients: ShineClient[] = [];
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');

  before(async () => {
    setup = await startClusterBesideBeta({
      processes: PROCESSES,
      clusterEnv: {
        SHINE_ADMIN_TOKEN: TOKEN,
        SHINE_WORKER_TICK_MS: '100',
        SHINE_S2S_TIMEOUT_MS: '3000',
        SHINE_FIRST_ATTEMPT_WAIT_MS: '300',
        SHINE_RETRY_SCHEDULE_MS: SCHEDULE,
        // The pool ROWS was sized for (the default is 256).
        SHINE_CONFIG_FILE: configFileWith({ deliveryPoolSize: 32 }),
      },
    });
    ({ cluster, beta, relay } = setup);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await setup?.close();
  });

  it(`${ROWS} rows due together: each reaches the recipient server once, by workers of every process`, async (t) => {
    const bobClient = await connectIdentity(beta.wsUrl, bob, ['beta'], 'bob-phone');
    clients.push(bobClient);
    const senders = await Promise.all(
      cluster.processes.map((p, i) => connectIdentity(p.wsUrl, alice, ['cluster'], `alice-${i}`)),
    );
    clients.push(...senders);
    await warmUp(senders[0]!, 'bob');

    await beta.kill('SIGTERM');
    const bobProfile = await senders[0]!.getProfile('bob');
    const bobKey = { login: 'bob', encKey: Buffer.from(bobProfile.encKeyB64, 'base64') };
    const t0 = Date.now();
    // Each pair is signed just before its send, so signing overlaps the cluster's answers.
    const pairs: ReturnType<typeof textPair>[] = [];
    const states: string[] = [];
    let next = 0;
    await Promise.all(
      senders.flatMap((sender) =>
        Array.from({ length: WINDOW }, async () => {
          for (let i = next++; i < ROWS; i = next++) {
            const p = textPair(alice, bobKey, `row ${i}`, { timeMs: t0 + i });
            pairs[i] = p;
            const r = await sender.request('SendMessagePair', {
              incomingBlobB64: p.incomingBlobB64,
              outgoingBlobB64: p.outgoingBlobB64,
            });
            states.push(r.deliveryState);
          }
        }),
      ),
    );
    const sentInMs = Date.now() - t0;
    assert.deepEqual(new Set(states), new Set(['accepted']), 'beta down: every pair accepted, none delivered');
    assert.equal(states.length, ROWS);

    // From here on, every ReceiveIncomingMessage the relay passes reaches beta. Counting starts before
    // beta comes back: workers reach it as soon as it listens, before restart() has seen it ready.
    const passed = new Map<string, number>();
    relay.filter = (frame) => {
      if (frame?.op === 'ReceiveIncomingMessage') {
        const blob = String(frame.payload?.incomingBlobB64);
        passed.set(blob, (passed.get(blob) ?? 0) + 1);
      }
      return 'pass';
    };
    const errorsAtRestart = await sumOver(cluster, 'shine_s2s_errors_total');
    const probesAtRestart = await sumOver(cluster, 'shine_delivery_probes_total');
    // A first attempt still connecting when beta came back may deliver its row itself (under load).
    const firstDelivered = () => sumOver(cluster, 'shine_delivery_first_attempts_total', { outcome: 'delivered' });
    const firstDeliveredAtRestart = await firstDelivered();
    await beta.restart();

    const accepted = async () =>
      (await adminGet<{ rows: unknown[] }>(cluster.processes[0]!.httpUrl, '/debug/delivery?state=accepted&limit=1'))
        .rows.length;
    const idle = async () =>
      (await sumOver(cluster, 'shine_delivery_attempts_running')) === 0 &&
      (await sumOver(cluster, 'shine_delivery_queue_depth')) === 0;
    await waitUntil(async () => (await accepted()) === 0 && (await idle()), 120_000, 'every row delivered');

    const passedCalls = () => [...passed.values()].reduce((a, b) => a + b, 0);
    // The calls first: a probe (a call a process makes on its own to a server that timed out, docs/protocol.md
    // §6.4) is counted before it is sent, so every probe among these calls is in the count read after them.
    const calls = passedCalls();
    const timedOut = (await sumOver(cluster, 'shine_s2s_errors_total')) - errorsAtRestart;
    const probes = (await sumOver(cluster, 'shine_delivery_probes_total')) - probesAtRestart;
    const expected = new Set(pairs.map((p) => p.incomingBlobB64));
    const byProcess = await Promise.all(
      cluster.processes.map((p) => metricSum(p.httpUrl, 'shine_delivery_attempts_total', { outcome: 'delivered' })),
    );
    t.diagnostic(
      `sent in ${sentInMs} ms; delivered by process ${byProcess.join(' / ')}; ` +
        `by first attempts after the restart ${(await firstDelivered()) - firstDeliveredAtRestart}; ` +
        `calls reaching beta ${calls} for ${ROWS} rows; calls timed out since beta came back ${timedOut}, probes ${probes}`,
    );

    assert.equal(
      [...passed.keys()].filter((k) => !expected.has(k)).length,
      0,
      'nothing but the rows reached beta after its restart',
    );
    assert.equal(passed.size, ROWS, 'every row reached beta');
    assert.ok(
      calls - ROWS <= timedOut + probes,
      `${calls - ROWS} extra calls, at most the ${timedOut} timed-out ones and the ${probes} probes`,
    );
    // A call the cluster gave up on may still be in beta's handler, which counts it when it returns (and a
    // late probe may still pass the relay: the count is the relay's as it is then).
    await waitUntil(
      async () =>
        (await metricSum(beta.httpUrl, 'shine_ops_total', { op: 'ReceiveIncomingMessage' })) === passedCalls(),
      10_000,
      'beta answered each call the relay passed',
    );
    const byFirstAttempt = (await firstDelivered()) - firstDeliveredAtRestart;
    assert.equal(
      byProcess.reduce((a, b) => a + b, 0) + byFirstAttempt,
      ROWS,
      'one successful attempt per row (a worker attempt, or a first attempt that outlived the outage)',
    );
    assert.ok(
      byProcess.every((n) => n > 0),
      'the worker of every process took part',
    );
    const bobAgain = await connectIdentity(beta.wsUrl, bob, ['beta'], 'bob-phone');
    clients.push(bobAgain);
    const history = await wholeHistory(bobAgain, 'alice');
    assert.equal(history.length, ROWS + 1, 'bob has each message once (and the warm-up)');
    assert.equal(new Set(history.map((h) => h.messageKey)).size, ROWS + 1);
  });
});

function sumOver(cluster: Cluster, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricSumOver(
    cluster.processes.map((p) => p.httpUrl),
    name,
    labels,
  );
}

async function adminGet<T>(httpUrl: string, path: string): Promise<T> {
  const res = await fetch(`${httpUrl}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  if (!res.ok) throw new Error(`GET ${path} answered ${res.status}`);
  return (await res.json()) as T;
}
