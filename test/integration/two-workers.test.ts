/**
 * Two delivery workers on ONE database never run the same attempt twice (docs/protocol.md §6.6: a lease and a
 * compare-and-set on row_version).
 *
 * Setup, all real: three `shine serve` processes. A1 and A2 are the same logical server `alpha` (same
 * SHINE_SERVER_KEY_SEED_B64, same SHINE_PUBLIC_WS_URL) on two ports, sharing one database (freshTestDb:
 * a SQLite file, or PostgreSQL under SHINE_TEST_DB=postgres) through SHINE_DB, each with its own connection and its own worker ticking every 50 ms. B (`beta`) is bob's
 * server, the real recipient. Before the servers start, the test process migrates the shared database (so
 * they do not race on migrations) and stores bob's profile in it as imported, as A would after a
 * GetUserProfile to B. Alice registers on A1, bob on B, and one warm-up pair goes through each of A1
 * and A2 (B then imports alice's profile, and both have their connection to B).
 *
 * Then, while both workers poll, the test opens a third connection to the database and stores ROWS pairs
 * with the store's own storePair in one burst, each with a delivery row `accepted`, attempt 0, due now
 * (the shape replication gives a pair nobody has tried yet, docs/protocol.md §6.8). Both workers see the same due
 * rows within a tick and race for them.
 *
 * The server-to-server timeout is 500 ms, so a lease (6 timeouts) is 3 s: shorter than the rows take
 * to go through. A lease taken when a row is scanned, instead of when its attempt starts, would run
 * out while the row waits in the queue, and the other worker would run the same attempt again.
 *
 * Proof that each attempt ran once: B answered ROWS more ReceiveIncomingMessage calls (its /metrics
 * `shine_ops_total{op="ReceiveIncomingMessage"}`) and no more than the allowed excess, the workers counted
 * exactly ROWS successful attempts, both took part, and every row ends `delivered` with its lease
 * released. The allowed excess, none on an idle machine: a call that timed out at A (counted in A's
 * `shine_s2s_errors_total`) yet reached B, whose row is retried — a new attempt, not the same one twice;
 * and a probe (A's `shine_delivery_probes_total`), the call A makes on its own to a server that timed
 * out, to find when it answers again (docs/protocol.md §6.4). A probe that times out counts in both, so
 * under load the bound is that much looser; with no call timed out it is exact. The counters are read
 * after every row is terminal and neither worker has an attempt queued or running: a claim needs
 * `state = 'accepted'`, so no attempt can start after that. A probe's timer may still fire: a probe is
 * counted before its call goes, and the probes are read after the calls.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ShineClient } from '../../src/client/index.js';
import { createIdentity, textPair } from '../../src/client/index.js';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { Store } from '../../src/server/store/types.js';
import { connectIdentity, metricSum, profileOf } from '../helpers/federated-processes.js';
import type { ServerProcess } from '../helpers/server-process.js';
import { configFileWith, freePort, startServerProcess } from '../helpers/server-process.js';
import type { TestDb } from '../helpers/test-db.js';
import { freshRedisPrefix, freshTestDb, openTestStore, testRedisUrl } from '../helpers/test-db.js';
import { metricSumOver } from '../helpers/metrics.js';
import { waitUntil } from '../helpers/wait.js';

const ROWS = 1000;

describe('two workers sharing one database', () => {
  let sharedDir: string;
  let db: TestDb;
  let store: Store;
  const servers: ServerProcess[] = [];
  const clients: ShineClient[] = [];
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');

  before(async () => {
    sharedDir = await mkdtemp(join(tmpdir(), 'shine-shared-'));
    db = await freshTestDb(sharedDir);
    store = await openTestStore(db.url);
    await store.migrate();
    await store.directory.putUser(profileOf(bob, ['beta']), 'imported', Date.now());
    const [pA1, pA2, pB] = await Promise.all([freePort(), freePort(), freePort()]);
    const logLevel = process.env.SHINE_TEST_LOG_LEVEL ?? 'error';
    const alpha = {
      SHINE_LOG_LEVEL: logLevel,
      SHINE_SERVER_LOGIN: 'alpha',
      SHINE_SERVER_KEY_SEED_B64: toBase64(randomBytes(32)),
      SHINE_PUBLIC_WS_URL: `ws://127.0.0.1:${pA1}/ws`,
      SHINE_DB: db.url,
      SHINE_DB_POOL_SIZE: '3',
      SHINE_PEERS: `beta=ws://127.0.0.1:${pB}/ws`,
      SHINE_WORKER_TICK_MS: '50',
      SHINE_S2S_TIMEOUT_MS: '500',
      // The pool this test's counts were sized for (the default is 256): the rows wait in the queue longer than
      // a lease, and B takes at most 2 × 32 calls at once.
      SHINE_CONFIG_FILE: configFileWith({ deliveryPoolSize: 32 }),
      // Quick retries for a call that timed out; the last offset is never reached, so no row can fail.
      // Offsets count from acceptance, and on a loaded machine B may take half a minute to take the whole
      // burst (on PostgreSQL every call is a transaction of its own): a call timing out after the last
      // quick offset would wait the hour.
      SHINE_RETRY_SCHEDULE_MS: '0,1000,2000,3000,5000,8000,12000,20000,30000,3600000',
      // Several processes on PostgreSQL need Redis (without it the second refuses to start).
      ...(db.kind === 'postgres' ? { SHINE_REDIS_URL: testRedisUrl(), SHINE_REDIS_PREFIX: freshRedisPrefix() } : {}),
    };
    const started = await Promise.allSettled([
      startServerProcess({ port: pA1!, env: alpha }),
      startServerProcess({ port: pA2!, env: alpha }),
      startServerProcess({
        port: pB!,
        env: {
          SHINE_LOG_LEVEL: logLevel,
          SHINE_SERVER_LOGIN: 'beta',
          SHINE_PEERS: `alpha=ws://127.0.0.1:${pA1}/ws`,
          // B takes up to 2 × 32 calls at once, each within A's 500 ms timeout. On PostgreSQL every call
          // is a transaction of its own (no group commit): with the test pool of 3 a burst outlasts the
          // timeout, rows run out of quick retries and wait an hour. B is not what this test checks.
          SHINE_DB_POOL_SIZE: '10',
        },
      }),
    ]);
    for (const s of started) if (s.status === 'fulfilled') servers.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(servers.map((s) => s.close()));
    await store?.close();
    await db?.drop();
    if (sharedDir) await rm(sharedDir, { recursive: true, force: true });
  });

  it(`${ROWS} rows due at once: each attempt reaches the recipient once, every row ends delivered`, async (t) => {
    const [a1, a2, b] = servers as [ServerProcess, ServerProcess, ServerProcess];
    const both = (name: string, labels: Record<string, string> = {}) =>
      metricSumOver([a1.httpUrl, a2.httpUrl], name, labels);
    const receiveCalls = () => metricSum(b.httpUrl, 'shine_ops_total', { op: 'ReceiveIncomingMessage' });
    const idle = async () =>
      (await both('shine_delivery_attempts_running')) === 0 && (await both('shine_delivery_queue_depth')) === 0;

    clients.push(await connectIdentity(b.wsUrl, bob, ['beta'], 'bob-phone'));
    const aliceOnA1 = await connectIdentity(a1.wsUrl, alice, ['alpha'], 'alice-phone');
    clients.push(aliceOnA1);
    const aliceOnA2 = await connectIdentity(a2.wsUrl, alice, ['alpha'], 'alice-laptop');
    clients.push(aliceOnA2);
    // One warm-up through each process (the one that stores a pair runs its first attempt), so both have
    // their connection to B before the burst: a first ServerAuth made during it would queue behind the
    // burst's calls at B and outlast the 500 ms timeout, attempt after attempt.
    const warm = [await aliceOnA1.sendText('bob', 'warm-up 1'), await aliceOnA2.sendText('bob', 'warm-up 2')];
    // Only what comes after the warm-up is counted: its rows must be settled and the workers idle.
    await waitUntil(
      async () => {
        const rows = await Promise.all(warm.map((w) => store.delivery.getDelivery(w.outgoingKey)));
        return rows.every((r) => r?.state === 'delivered') && (await idle());
      },
      15_000,
      'warm-ups delivered',
    );
    const callsBefore = await receiveCalls();
    const errorsBefore = await both('shine_s2s_errors_total');
    const probesBefore = await both('shine_delivery_probes_total');
    const deliveredBefore = await both('shine_delivery_attempts_total', { outcome: 'delivered' });

    const bobKey = { login: 'bob', encKey: Buffer.from(bob.encPublicKey) };
    const now = Date.now();
    const pairs = Array.from({ length: ROWS }, (_, i) =>
      textPair(alice, bobKey, `row ${i}`, { timeMs: now - ROWS + i }),
    );
    // One burst in one turn of the event loop: the store's group commit writes it in a few transactions.
    const stored = await Promise.all(
      pairs.map((p) =>
        store.messages.storePair({
          incoming: p.incoming,
          outgoing: p.outgoing,
          nowMs: now,
          outbox: { owners: new Map([['alice', true]]) },
          delivery: { state: 'accepted', attempt: 0, acceptedAtMs: now, nextAttemptAtMs: now },
        }),
      ),
    );
    assert.ok(stored.every((r) => r.outgoing.outcome === 'inserted' && r.deliveryState === 'accepted'));

    await waitUntil(
      async () => (await store.delivery.countDeliveriesByState()).accepted === 0 && (await idle()),
      60_000,
      'every row terminal and both workers idle',
    );

    assert.deepEqual(await store.delivery.countDeliveriesByState(), { accepted: 0, delivered: ROWS + 2, failed: 0 });
    const rows = await Promise.all(stored.map((r) => store.delivery.getDelivery(r.outgoing.messageKey)));
    assert.ok(
      rows.every((r) => r?.state === 'delivered' && r.leaseUntilMs === null),
      'each row delivered, lease released',
    );
    const calls = (await receiveCalls()) - callsBefore;
    const timedOut = (await both('shine_s2s_errors_total')) - errorsBefore;
    const probes = (await both('shine_delivery_probes_total')) - probesBefore;
    const byA1 = await metricSum(a1.httpUrl, 'shine_delivery_attempts_total', { outcome: 'delivered' });
    const byA2 = await metricSum(a2.httpUrl, 'shine_delivery_attempts_total', { outcome: 'delivered' });
    t.diagnostic(
      `delivered by A1 ${byA1}, by A2 ${byA2}; calls at B ${calls} for ${ROWS} rows; ` +
        `timed-out calls ${timedOut}; probes ${probes}`,
    );

    assert.equal(byA1 + byA2 - deliveredBefore, ROWS, 'one successful attempt per row');
    assert.ok(
      calls >= ROWS && calls <= ROWS + timedOut + probes,
      `ReceiveIncomingMessage calls at B (${calls}) = rows (${ROWS}) + at most the timed-out calls (${timedOut}) ` +
        `and the probes (${probes})`,
    );
    assert.ok(byA1 > 0 && byA2 > 0, 'both workers took part');
  });
});
