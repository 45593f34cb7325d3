/**
 * Load (issue 13): one server holds 2 × LOAD_USERS logged-in sessions (every user on two devices)
 * while federated with a second one, under LOAD_SECONDS of mixed traffic at LOAD_RATE operations/s:
 * text sends (a fifth to users of the other server), read receipts, history pages and settings. No
 * answer may be an error other than 429 RATE_LIMITED, and every message answered 200 must be stored
 * exactly once for its recipient, on whichever server the recipient lives. Prints the server's RSS
 * per idle session and its event loop's p99 lag.
 *
 * Short in npm test (100 users, 10 s); `npm run load` holds 2 000 sessions for a minute. LOAD_SEED
 * picks the traffic.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import type { ErrorResponse } from '../../src/protocol/envelope.js';
import { startFederatedProcesses } from '../helpers/federated-processes.js';
import { metricSum } from '../helpers/metrics.js';
import type { RawClient } from '../helpers/raw-client.js';
import type { Ref } from '../helpers/replication.js';
import { pairOf, seedFor } from '../helpers/replication.js';
import { queryTestDb } from '../helpers/test-db.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const USERS = Number(process.env.LOAD_USERS ?? 100);
const SECONDS = Number(process.env.LOAD_SECONDS ?? 10);
const RATE = Number(process.env.LOAD_RATE ?? 100);
const SEED = Number(process.env.LOAD_SEED ?? 1);
const REMOTE_USERS = 10;
/** Sessions logging in at once. */
const AT_ONCE = 32;

/** A small seeded generator (xorshift32), so a run's traffic is the same every time. */
function prng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

/** Opens `count` sessions, AT_ONCE at a time. */
async function openAll(count: number, open: (i: number) => Promise<RawClient>): Promise<RawClient[]> {
  const out: RawClient[] = [];
  for (let i = 0; i < count; i += AT_ONCE)
    out.push(...(await Promise.all(Array.from({ length: Math.min(AT_ONCE, count - i) }, (_, k) => open(i + k)))));
  return out;
}

describe('load: mixed traffic on thousands of sessions while federated', () => {
  it(`${2 * USERS} sessions, ${SECONDS} s at ${RATE} ops/s: no error but 429, every acknowledged message stored once`, async (t) => {
    const random = prng(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    const [a, b] = (await startFederatedProcesses([{ serverLogin: 'alpha' }, { serverLogin: 'beta' }])) as [
      Awaited<ReturnType<typeof startFederatedProcesses>>[number],
      Awaited<ReturnType<typeof startFederatedProcesses>>[number],
    ];
    const sessions: RawClient[] = [];
    try {
      const locals = Array.from({ length: USERS }, (_, i) => makeUser(`load${i}`, ['alpha'], seedFor(`load${i}`)));
      const remotes = Array.from({ length: REMOTE_USERS }, (_, i) => makeUser(`far${i}`, ['beta'], seedFor(`far${i}`)));
      sessions.push(...(await openAll(REMOTE_USERS, (i) => connectUser(b.wsUrl, remotes[i]!, 'far-phone'))));
      const rssBefore = a.rssKiB();
      const phones = await openAll(USERS, (i) => connectUser(a.wsUrl, locals[i]!, 'phone'));
      const laptops = await openAll(USERS, (i) => connectUser(a.wsUrl, locals[i]!, 'laptop'));
      sessions.push(...phones, ...laptops);
      await waitUntil(
        async () => (await metricSum(a.httpUrl, 'shine_sessions_open')) >= 2 * USERS,
        30_000,
        'every session open on alpha',
      );
      const perSessionKiB = (a.rssKiB() - rssBefore) / (2 * USERS);
      const lagBefore = await metricSum(a.httpUrl, 'nodejs_eventloop_lag_p99_seconds');

      // The traffic: each operation at its time, not waiting for the ones before.
      const ops: Record<string, number> = {};
      const answers: Record<string, number> = {};
      const acknowledged: { owner: string; server: 'alpha' | 'beta'; key: string }[] = [];
      const received: { from: string; to: string; ref: Ref }[] = [];
      const inFlight: Promise<void>[] = [];
      const t0 = Date.now();
      const base = t0 - 60_000;
      let nonce = 0;
      const run = (kind: string, session: RawClient, op: string, payload: unknown, then?: () => void) => {
        ops[kind] = (ops[kind] ?? 0) + 1;
        inFlight.push(
          session.request(op, payload, { timeoutMs: 60_000 }).then((answer) => {
            const code = answer.ok ? '200' : (answer as ErrorResponse).error.code;
            answers[`${op} ${code}`] = (answers[`${op} ${code}`] ?? 0) + 1;
            if (answer.ok) then?.();
          }),
        );
      };
      for (let n = 0; n < SECONDS * RATE; n++) {
        const due = t0 + (n * 1000) / RATE;
        if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
        const i = Math.floor(random() * USERS);
        const me = locals[i]!;
        const session = random() < 0.5 ? phones[i]! : laptops[i]!;
        const roll = random();
        if (roll < 0.5) {
          const remote = random() < 0.2;
          const to = remote ? pick(remotes) : pick(locals.filter((u) => u !== me));
          const ref = { from: me.login, to: to.login, timeMs: base + n, nonce: ++nonce };
          const p = pairOf(ref);
          run(remote ? 'send to the other server' : 'send', session, 'SendMessagePair', p, () => {
            acknowledged.push({ owner: to.login, server: remote ? 'beta' : 'alpha', key: `${p.baseKey}|1` });
            if (!remote) received.push({ from: me.login, to: to.login, ref });
          });
        } else if (roll < 0.65 && received.length > 0) {
          // The recipient reads a message it got: a receipt pair back to its sender.
          const m = pick(received);
          const reader = locals.findIndex((u) => u.login === m.to);
          const p = pairOf(
            { from: m.to, to: m.from, timeMs: base + n, nonce: ++nonce },
            { kind: 'receipt', target: m.ref, readAtMs: Date.now() },
          );
          run('read receipt', random() < 0.5 ? phones[reader]! : laptops[reader]!, 'SendMessagePair', p);
        } else if (roll < 0.9) {
          run('history page', session, 'GetDirectMessages', { peerLogin: pick(locals).login, limit: 50 });
        } else {
          run('setting', session, 'SetUserSetting', {
            key: `k${n % 7}`,
            valueB64: toBase64(utf8(`v${n}`)),
            updatedAtMs: Date.now(),
          });
        }
      }
      await Promise.all(inFlight);
      const seconds = (Date.now() - t0) / 1000;
      const lagP99 = await metricSum(a.httpUrl, 'nodejs_eventloop_lag_p99_seconds');

      const errors = Object.entries(answers).filter(([k]) => !/ (200|RATE_LIMITED)$/.test(k));
      assert.deepEqual(errors, [], 'no error answer other than 429');
      // Every acknowledged message is stored once for its recipient, where the recipient lives (the
      // other server's copies arrive by the first attempt or the worker soon after).
      for (const [server, db] of [
        ['alpha', a.dbUrl],
        ['beta', b.dbUrl],
      ] as const) {
        const wanted = acknowledged.filter((m) => m.server === server);
        const count = async () => {
          const rows = await queryTestDb(
            db,
            `SELECT owner_login AS owner, message_key AS k FROM signed_messages WHERE message_type = 1`,
          );
          const have = new Map<string, number>();
          for (const r of rows)
            have.set(`${String(r.owner)} ${String(r.k)}`, (have.get(`${String(r.owner)} ${String(r.k)}`) ?? 0) + 1);
          return wanted.filter((m) => have.get(`${m.owner} ${m.key}`) === 1).length;
        };
        await waitUntil(
          async () => (await count()) === wanted.length,
          60_000,
          `every message to ${server} stored once`,
        );
      }
      t.diagnostic(
        `LOAD_SEED=${SEED}: ${2 * USERS} sessions on alpha (+${REMOTE_USERS} on beta), ${SECONDS * RATE} operations in ${seconds.toFixed(1)} s ` +
          `${JSON.stringify(ops)}; answers ${JSON.stringify(answers)}; ${acknowledged.length} messages stored once; ` +
          `RSS ${perSessionKiB.toFixed(1)} KiB per idle session; event-loop lag p99 ${(lagBefore * 1000).toFixed(1)} ms idle, ` +
          `${(lagP99 * 1000).toFixed(1)} ms after the load`,
      );
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
      await Promise.all([a.close(), b.close()]);
    }
  });
});
