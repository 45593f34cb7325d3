/**
 * The delivery backlog after an outage (docs/protocol.md §6.4–6.6): alice<i>@A → bob<i>@B while B is down,
 * then B comes back and A's worker delivers everything it kept. Prints one JSON line with
 *  - accepting: the pairs A took while B was down (each answered `accepted`), pairs/s and answer p50/p99;
 *  - drain: from B's restart until the sender learnt the last pair was `delivered` (DmDeliveryStateChanged):
 *    how long A took to notice B (first delivery), pairs/s from the first delivery to the last, and A's and
 *    B's CPU meanwhile (on PostgreSQL also both databases' backends', bench/lib/pg-cpu.ts).
 *
 * A notices B's return by its background redial, whose backoff is capped at s2sTimeoutMs: both servers run
 * with s2sTimeoutMs BENCH_S2S_TIMEOUT_MS (5000), and B stays down BENCH_DOWN_MS after the last answer (three
 * of them and 500 ms, as in the eighteenth session, when A woke only rows accepted that long ago). While B is down an answer waits for its first attempt's call only while A is not backing off
 * from B (§6.2), and at most firstAttemptWaitMs (the server's default, 3000, unless BENCH_FIRST_WAIT_MS).
 * The retry schedule is the default: rows accepted more than 30 s before B's return meet their second
 * attempt while B is still down (BENCH_DOWN_MS=40000 makes every row do so, and some of those attempts run
 * as B comes back), so the deliveries here are the worker's attempts after the wake-up. Durability: SQLite
 * WAL + synchronous=FULL on both servers (BENCH_SYNC=normal
 * for NORMAL); BENCH_DB=postgres runs both on PostgreSQL, each on a fresh database with synchronous_commit
 * on (printed).
 *
 * BENCH_FAULT=stop hangs B instead (SIGSTOP, and SIGCONT for its return) while A holds a connection to it: no
 * call is refused, A's calls on that connection go unanswered until its heartbeat drops it, and each redial
 * hangs until its handshake times out (s2sTimeoutMs), as with a host that drops packets.
 * BENCH_FAULT=lock (BENCH_DB=postgres) leaves B running but its database stuck: the bench holds an ACCESS
 * EXCLUSIVE lock on B's signed_messages until B's "return", so B answers pings but no ReceiveIncomingMessage,
 * and each of A's calls times out (s2sTimeoutMs) on a connection that stays up.
 *
 * Env: BENCH_CLIENTS (20), BENCH_PAIRS (pairs per client, 250), BENCH_WINDOW (4), BENCH_SYNC (full),
 * BENCH_DB (sqlite | postgres), BENCH_S2S_TIMEOUT_MS (5000), BENCH_DOWN_MS (3 × BENCH_S2S_TIMEOUT_MS + 500),
 * BENCH_FIRST_WAIT_MS (the server's default), BENCH_FAULT (kill | stop | lock), BENCH_POOL (A's and B's
 * deliveryPoolSize; the server's default), BENCH_RTT_MS (0: a round trip between A and B, through relays
 * that hold every chunk half that long each way, bench/lib/delay-link.ts, as between two data centres).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { BuiltPair, ShineClient } from '../src/client/index.js';
import { textPair } from '../src/client/index.js';
import { Tracker, benchUsers, connectBenchUsers, scrape, send, startBenchServers } from './lib/federated-load.js';
import { machine, sqliteWriter } from './lib/machine.js';
import { CONFIG_DEFAULTS } from '../src/server/config/config.js';
import { inLanes } from './lib/send-load.js';
import { backendCpuMeter } from './lib/pg-cpu.js';
import { ascending, pct } from './lib/percentile.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 250);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 4);
const S2S_TIMEOUT_MS = Number(process.env.BENCH_S2S_TIMEOUT_MS ?? 5000);
const FIRST_WAIT_MS = process.env.BENCH_FIRST_WAIT_MS ? Number(process.env.BENCH_FIRST_WAIT_MS) : undefined;
const DOWN_MS = Number(process.env.BENCH_DOWN_MS ?? 3 * S2S_TIMEOUT_MS + 500);
const FAULT = (['stop', 'lock'] as const).find((f) => f === process.env.BENCH_FAULT) ?? 'kill';
const db = process.env.BENCH_DB === 'postgres' ? 'postgres' : 'sqlite';
const RTT_MS = Number(process.env.BENCH_RTT_MS ?? 0);
if (FAULT === 'lock' && db !== 'postgres') throw new Error('BENCH_FAULT=lock needs BENCH_DB=postgres');
const total = CLIENTS * PAIRS;

/** How many of the times (ms from some start) fall in each second from it. */
function perSecond(ms: number[]): number[] {
  const out: number[] = [];
  for (const t of ms) {
    const s = Math.floor(t / 1000);
    while (out.length <= s) out.push(0);
    out[s]!++;
  }
  return out;
}

const started = await startBenchServers({
  sync: process.env.BENCH_SYNC === 'normal' ? 'normal' : 'full',
  db,
  rttMs: RTT_MS,
  config: {
    s2sTimeoutMs: S2S_TIMEOUT_MS,
    ...(process.env.BENCH_POOL ? { deliveryPoolSize: Number(process.env.BENCH_POOL) } : {}),
    ...(FIRST_WAIT_MS === undefined ? {} : { firstAttemptWaitMs: FIRST_WAIT_MS }),
  },
});
const { a, b } = started;
let clients: ShineClient[] = [];
let stopped = false;
/** The transaction holding B's lock (BENCH_FAULT=lock). */
let lock: pg.Client | null = null;
try {
  const users = benchUsers(CLIENTS);
  const base = Date.now() - 60_000;
  const pairs: BuiltPair[][] = users.senders.map((alice, i) =>
    Array.from({ length: PAIRS }, (_, k) =>
      textPair(
        alice,
        { login: users.recipients[i]!.login, encKey: users.recipients[i]!.encPublicKey },
        `message ${k} from alice${i}`,
        { timeMs: base + k },
      ),
    ),
  );
  // The drain may take minutes where the worker is slow: its deadline is generous.
  const tracker = new Tracker(600_000);
  clients = await connectBenchUsers(started, users, (key) => tracker.delivered(key));

  // 1. B goes down (or hangs); A accepts every pair and keeps it.
  if (FAULT === 'stop') {
    process.kill(b.pid, 'SIGSTOP');
    stopped = true;
  } else if (FAULT === 'lock') {
    lock = new pg.Client({ connectionString: started.dbUrls[1]! });
    await lock.connect();
    await lock.query('BEGIN');
    await lock.query('LOCK TABLE signed_messages IN ACCESS EXCLUSIVE MODE');
  } else await b.kill('SIGTERM');
  const answerMs: number[] = [];
  const states: Record<string, number> = {};
  const t0 = performance.now();
  await inLanes(CLIENTS, PAIRS, WINDOW, async (i, k) => {
    const sentAt = performance.now();
    const state = await send(clients[i]!, pairs[i]![k]!, tracker);
    answerMs.push(performance.now() - sentAt);
    if (state) states[state] = (states[state] ?? 0) + 1;
  });
  const acceptMs = performance.now() - t0;
  const answers = ascending(answerMs);
  await sleep(DOWN_MS);

  // The worker's attempts while B was down (those at the 30 s offset, with BENCH_DOWN_MS long enough).
  const metricsA = await scrape(a);
  const attemptsWhileDown = ['retry', 'failed', 'extra'].reduce(
    (n, outcome) => n + metricsA(`shine_delivery_attempts_total{outcome="${outcome}"}`),
    0,
  );
  const downSeconds = (performance.now() - t0) / 1000;

  // 2. B is back: A notices it and its worker delivers the backlog.
  if (FAULT === 'stop') {
    process.kill(b.pid, 'SIGCONT');
    stopped = false;
  } else if (FAULT === 'lock') {
    await lock!.query('COMMIT');
    await lock!.end();
    lock = null;
  } else await b.restart();
  const t1 = performance.now();
  const [cpuA0, cpuB0] = [a.cpuMs(), b.cpuMs()];
  const [statsA0, statsB0] = await Promise.all([scrape(a), scrape(b)]);
  const dbCpu = await backendCpuMeter(started.dbUrls);
  dbCpu.mark();
  const last = await tracker.allDelivered();
  const delivered = tracker.deliveredTimes().filter((t) => t >= t1);
  const first = delivered[0] ?? last;
  const drainMs = Math.max(1, last - first);
  const [statsA1, statsB1] = await Promise.all([scrape(a), scrape(b)]);
  const since = (before: typeof statsA0, after: typeof statsA0, series: string): number =>
    after(series) - before(series);
  const received = 'shine_op_duration_seconds_{}{op="ReceiveIncomingMessage"}';
  const receivedCount = since(statsB0, statsB1, received.replace('{}', 'count'));
  const round1 = (x: number): number => Number(x.toFixed(1));
  console.log(
    JSON.stringify({
      bench: 'backlog',
      date: new Date().toISOString(),
      machine: machine(),
      durability: await started.durability(),
      db,
      sqliteWriter: db === 'sqlite' ? sqliteWriter() : null,
      setup: `A and B are separate \`shine serve\` processes on loopback${RTT_MS > 0 ? `, each calling the other over a ${RTT_MS} ms round trip` : ''}, s2sTimeoutMs ${S2S_TIMEOUT_MS} and firstAttemptWaitMs ${FIRST_WAIT_MS ?? 'default (3000)'} on both, default retry schedule and worker; ${{ stop: 'B stopped (SIGSTOP) before the sends and continued (SIGCONT)', lock: "B's signed_messages locked before the sends and released", kill: 'B killed (SIGTERM) before the sends and restarted' }[FAULT]} ${DOWN_MS} ms after the last answer`,
      fault: FAULT,
      linkRttMs: RTT_MS,
      deliveryPoolSize: process.env.BENCH_POOL ? Number(process.env.BENCH_POOL) : CONFIG_DEFAULTS.deliveryPoolSize,
      clients: CLIENTS,
      window: WINDOW,
      pairs: total,
      accepting: {
        pairsPerSec: Math.round(total / (acceptMs / 1000)),
        answerMsP50: pct(answers, 0.5),
        answerMsP99: pct(answers, 0.99),
        answerMsMax: Math.round(answers[answers.length - 1] ?? 0),
        /** Answers that took a second or more (waited for a call). */
        slowAnswers: answers.filter((ms) => ms >= 1000).length,
        answers: states,
        errors: tracker.errors,
      },
      whileDown: {
        seconds: round1(downSeconds),
        /** Worker attempts A made meanwhile (each row's second comes 30 s after its acceptance). */
        workerAttempts: attemptsWhileDown,
      },
      drain: {
        deliveredAfterRestart: delivered.length,
        firstDeliveryAfterRestartMs: round1(first - t1),
        seconds: round1(drainMs / 1000),
        pairsPerSec: Math.round(delivered.length / (drainMs / 1000)),
        secondsFromRestart: round1((last - t1) / 1000),
        /** Pairs delivered in each second after the restart. */
        deliveredPerSecond: perSecond(delivered.map((t) => t - t1)),
        cpuPercentOfOneCore: {
          A: Math.round(((a.cpuMs() - cpuA0) / (last - t1)) * 100),
          B: Math.round(((b.cpuMs() - cpuB0) / (last - t1)) * 100),
        },
        /** B's mean time from a ReceiveIncomingMessage frame to its answer. */
        receiveMsMean: round1(
          (since(statsB0, statsB1, received.replace('{}', 'sum')) * 1000) / Math.max(1, receivedCount),
        ),
        /** Commits of A's and B's databases meanwhile. */
        commits: {
          A: since(statsA0, statsA1, 'shine_db_commits_total'),
          B: since(statsB0, statsB1, 'shine_db_commits_total'),
        },
        ...(db === 'postgres'
          ? { databaseCpuPercentOfOneCore: Math.round(((await dbCpu.msSinceMark()) / (last - t1)) * 100) }
          : {}),
      },
    }),
  );
} finally {
  if (stopped) process.kill(b.pid, 'SIGCONT');
  await lock?.end();
  await Promise.all(clients.map((c) => c.close()));
  await started.close();
}
