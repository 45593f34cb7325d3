/**
 * Fault test (docs/protocol.md §6 "any process may die between any two steps", §9 "a 200 answer means the data is
 * on stable storage"): the sender's server is killed with SIGKILL in the middle of a burst of sends.
 *
 * Two real `shine serve` processes on loopback: A (`alpha`, alice's server) and B (`beta`, bob's),
 * federated through SHINE_PEERS, with the hour of retries compressed to 2 s and a 50 ms worker tick.
 * Twenty alice sessions send a burst of 1 000 SendMessagePair requests into A, ten in flight per
 * session; when 250 are answered, A gets SIGKILL. At that moment pairs are at every stage: answered,
 * committed but not answered, delivered to B but not yet marked `delivered` on A, being verified or
 * waiting for the group commit (never stored), or not sent yet. A is then restarted on the same port
 * and data folder, and its worker finishes the rows left `accepted` (one attempt each: the compressed
 * schedule is over by then).
 *
 * Checked: every pair answered 200 is in alice's history on A exactly once and ends `delivered` or
 * `failed` (here always `delivered`: B never went down); bob's history on B holds each delivered
 * message exactly once (in history and as live DirectMessage events), holds nothing that alice did not
 * send, and holds nothing A does not know; pairs whose request got no answer may or may not exist, but never twice.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { BuiltPair, DeliveryState, HistoryItem, ShineClient } from '../../src/client/index.js';
import { ShineClientError, createIdentity, textPair } from '../../src/client/index.js';
import { messageKeyOf } from '../../src/protocol/container.js';
import type { DeliveryRow } from '../../src/server/store/types.js';
import {
  adminGet,
  connectIdentity,
  metricSum,
  startFederatedProcesses,
  wholeHistory,
} from '../helpers/federated-processes.js';
import type { ServerProcess } from '../helpers/server-process.js';
import { waitUntil } from '../helpers/wait.js';

const CLIENTS = 20;
const PER_CLIENT = 50;
const TOTAL = CLIENTS * PER_CLIENT;
/** Answers received before A is killed. */
const KILL_AFTER = 250;
/** Requests each client keeps in flight. */
const WINDOW = 10;

type Outcome =
  { kind: 'answered'; deliveryState: DeliveryState } | { kind: 'rejected'; code: string } | { kind: 'no-answer' };

/** Keys of a pair, as the server names them. */
function keysOf(p: BuiltPair): { outgoingKey: string; incomingKey: string } {
  return { outgoingKey: messageKeyOf(p.outgoing), incomingKey: messageKeyOf(p.incoming) };
}

/** Message keys that occur more than once. */
function duplicates(items: HistoryItem[]): string[] {
  const seen = new Set<string>();
  return items.map((i) => i.messageKey).filter((k) => seen.has(k) || !seen.add(k));
}

describe('SIGKILL of the sender server during a burst of 1 000 sends', () => {
  let a: ServerProcess;
  let b: ServerProcess;
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');
  const clients: ShineClient[] = [];

  before(async () => {
    [a, b] = (await startFederatedProcesses([{ serverLogin: 'alpha' }, { serverLogin: 'beta' }], {
      SHINE_RETRY_SCHEDULE_MS: '0,500,1000,1500,2000',
      SHINE_WORKER_TICK_MS: '50',
      SHINE_S2S_TIMEOUT_MS: '3000',
    })) as [ServerProcess, ServerProcess];
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all([a?.close(), b?.close()]);
  });

  it('every answered pair ends terminal on A and exactly once at bob; unanswered ones at most once', async (t) => {
    const bobOnB = await connectIdentity(b.wsUrl, bob, ['beta'], 'bob-phone');
    clients.push(bobOnB);
    // Bob's live session: each stored copy must reach it once, never again on a repeated delivery.
    const bobEvents: string[] = [];
    bobOnB.on('DirectMessage', (e) => bobEvents.push(e.messageKey));
    for (let i = 0; i < CLIENTS; i++) clients.push(await connectIdentity(a.wsUrl, alice, ['alpha'], `alice-${i}`));
    const senders = clients.slice(1);

    // One message first: A imports bob's profile and B imports alice's, so the burst measures sends only.
    const warm = await senders[0]!.sendText('bob', 'warm-up');
    // Delivered in the answer, or (first contact on a loaded machine) by a retry soon after.
    await waitUntil(() => bobEvents.includes(warm.incomingKey), 20_000, 'the warm-up message at bob');

    const bobProfile = await senders[0]!.getProfile('bob');
    const bobKey = { login: 'bob', encKey: Buffer.from(bobProfile.encKeyB64, 'base64') };
    const t0 = Date.now();
    const pairs = Array.from({ length: TOTAL }, (_, i) => textPair(alice, bobKey, `burst ${i}`, { timeMs: t0 + i }));

    let answered = 0;
    const kill: { done?: Promise<void> } = {};
    const outcomes: Outcome[] = [];
    const send = async (i: number): Promise<Outcome> => {
      const p = pairs[i]!;
      try {
        const r = await senders[i % CLIENTS]!.request('SendMessagePair', {
          incomingBlobB64: p.incomingBlobB64,
          outgoingBlobB64: p.outgoingBlobB64,
        });
        if (++answered === KILL_AFTER) kill.done = a.kill('SIGKILL');
        return { kind: 'answered', deliveryState: r.deliveryState };
      } catch (err) {
        if (err instanceof ShineClientError && err.status === 0) return { kind: 'no-answer' };
        if (err instanceof ShineClientError) return { kind: 'rejected', code: err.code };
        throw err;
      }
    };
    // Each client keeps WINDOW requests in flight, so at the kill requests are at every stage: being
    // verified, waiting for the group commit, waiting for B, answered, or not sent yet.
    await Promise.all(
      senders.map(async (_, c) => {
        let k = 0;
        const lane = async (): Promise<void> => {
          for (let n = k++; n < PER_CLIENT; n = k++) outcomes[n * CLIENTS + c] = await send(n * CLIENTS + c);
        };
        await Promise.all(Array.from({ length: WINDOW }, lane));
      }),
    );
    assert.ok(kill.done, `A was killed during the burst (answers: ${answered})`);
    await kill.done;
    const ok = pairs.filter((_, i) => outcomes[i]!.kind === 'answered');
    const lost = outcomes.filter((o) => o.kind === 'no-answer').length;
    const rejected = outcomes.flatMap((o) => (o.kind === 'rejected' ? [o.code] : []));
    assert.deepEqual(rejected, [], 'no request was refused');
    assert.ok(
      ok.length >= KILL_AFTER && lost > 0,
      `the kill cut the burst (answered ${ok.length}, unanswered ${lost})`,
    );

    await a.restart();
    // The restarted worker finishes every row left `accepted` (the schedule is long over: one attempt each).
    await waitUntil(
      async () =>
        (await adminGet<{ rows: DeliveryRow[] }>(a, '/debug/delivery?state=accepted&limit=1000')).rows.length === 0,
      30_000,
      'no accepted delivery rows left on A',
    );

    const aliceOnA = await connectIdentity(a.wsUrl, alice, ['alpha'], 'alice-check');
    clients.push(aliceOnA);
    const aliceItems = (await wholeHistory(aliceOnA, 'bob')).filter((i) => i.messageType === 2);
    const bobItems = await wholeHistory(bobOnB, 'alice');
    assert.deepEqual(duplicates(aliceItems), [], 'alice holds each pair once');
    assert.deepEqual(duplicates(bobItems), [], 'bob holds each message once');
    assert.ok(bobItems.every((i) => i.messageType === 1));
    assert.deepEqual(
      [...bobEvents].sort(),
      bobItems.map((i) => i.messageKey).sort(),
      "bob's session got one DirectMessage per stored copy",
    );

    const stateOnA = new Map(aliceItems.map((i) => [i.messageKey, i.deliveryState]));
    const onB = new Set(bobItems.map((i) => i.messageKey));
    for (const p of ok) {
      const { outgoingKey, incomingKey } = keysOf(p);
      const state = stateOnA.get(outgoingKey);
      assert.ok(
        state === 'delivered' || state === 'failed',
        `answered pair ${outgoingKey} is on A and terminal (got ${state})`,
      );
      // B was up all along, so nothing may fail; a delivered pair is at bob.
      assert.equal(state, 'delivered', `${outgoingKey} delivered`);
      assert.ok(onB.has(incomingKey), `${incomingKey} is at bob`);
    }
    // Bob holds only what alice sent, and only what A stored (no copy without its pair at the sender).
    const sent = new Set([warm.incomingKey, ...pairs.map((p) => keysOf(p).incomingKey)]);
    for (const key of onB) {
      assert.ok(sent.has(key), `${key} was sent by alice`);
      assert.equal(stateOnA.get(key.replace(/\|1$/, '|2')), 'delivered', `${key} at bob is delivered on A`);
    }
    // Every pair A stored (answered or not) ended delivered, and bob has exactly those.
    assert.ok([...stateOnA.values()].every((s) => s === 'delivered'));
    assert.equal(onB.size, stateOnA.size, 'bob holds exactly the pairs A stored');
    assert.ok(stateOnA.size >= ok.length + 1 && stateOnA.size <= TOTAL + 1);
    const repaired = await metricSum(a.httpUrl, 'shine_delivery_attempts_total');
    t.diagnostic(
      `answered ${ok.length}, unanswered ${lost}, stored on A ${stateOnA.size - 1} (${stateOnA.size - 1 - ok.length} never answered), ` +
        `at bob ${onB.size - 1}, attempts by the restarted worker ${repaired}`,
    );
  });
});
