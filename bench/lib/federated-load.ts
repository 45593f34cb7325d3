/**
 * Federated delivery between two `shine serve` processes on this machine: alice<i>@A (`alpha`) →
 * bob<i>@B (`beta`), every pair delivered by A's first attempt (ReceiveIncomingMessage to B) or, if
 * that is late, its worker. After an optional warm-up (`warmup` pairs per client, delivered and not counted),
 * measures
 *  - throughput: `clients` concurrent senders with `window` requests in flight each, pairs/s counted
 *    from the first send until the last pair is `delivered` (answer or DmDeliveryStateChanged event);
 *  - fixedRate: `rate` pairs/s for `seconds` s, p50/p99/max latency from send to `delivered`, and
 *    each server's garbage-collection pauses meanwhile (prom-client's nodejs_gc_duration_seconds);
 * with both servers' CPU (percent of one core, per phase; on PostgreSQL their databases' too), their
 * commits per pair in each phase, and their peak RSS. Client, A and B share the
 * machine's cores. Both servers get the per-connection rate limit lifted (UNLIMITED_RATE): the default
 * 200 requests/s would measure the limit (429s), not the delivery path.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BuiltPair, Identity, ShineClient } from '../../src/client/index.js';
import { ShineClientError, createIdentity } from '../../src/client/index.js';
import { messageKeyOf } from '../../src/protocol/container.js';
import type { DeliveryState } from '../../src/protocol/ops.js';
import { connectIdentity, startFederatedProcesses } from '../../test/helpers/federated-processes.js';
import type { ServerProcess } from '../../test/helpers/server-process.js';
import { freePort } from '../../test/helpers/server-process.js';
import { freshTestDb } from '../../test/helpers/test-db.js';
import { postgresDurability, sqliteWriter } from './machine.js';
import { startDelayLink } from './delay-link.js';
import type { SqliteWriter } from '../../src/server/store/sqlite/threaded.js';
import type { BackendCpuMeter } from './pg-cpu.js';
import { backendCpuMeter } from './pg-cpu.js';
import { ascending, pct } from './percentile.js';
import { UNLIMITED_RATE, inLanes } from './send-load.js';
import type { PairTiming, TailReport } from './tail.js';
import { startTailRecording, tailReport } from './tail.js';
import type { PairOrder } from './build-pairs.js';
import { buildTextPairs, perClient } from './build-pairs.js';

export interface FederatedSendOptions {
  clients: number;
  /** Pairs per client in the throughput phase. */
  pairs: number;
  /** Requests in flight per client in the throughput phase. */
  window: number;
  /**
   * Pairs per client sent (with `window` in flight) and delivered before the throughput clock starts, not
   * counted (0 by default): the servers' code is then compiled and their caches warm, so the figure is their
   * steady rate rather than one that includes their first seconds (docs/performance.md, thirty-third session).
   */
  warmup?: number;
  /** Pairs per second in the fixed-rate phase. */
  rate: number;
  seconds: number;
  sync: 'full' | 'normal';
  /** Each server's database: a SQLite file (default), or a fresh PostgreSQL database of its own. */
  db?: 'sqlite' | 'postgres';
  /** Record every process's GC pauses and event-loop stalls and say which the slowest pairs overlapped (bench/lib/tail.ts). */
  tail?: boolean;
  /** A round trip between A and B (startBenchServers); 0 by default. */
  rttMs?: number;
}

export interface FederatedSendResult {
  durability: string;
  db: 'sqlite' | 'postgres';
  /** SHINE_SQLITE_WRITER of both servers (SQLite only). */
  sqliteWriter: SqliteWriter | null;
  throughput: {
    pairs: number;
    clients: number;
    window: number;
    warmupPerClient: number;
    warmupErrors: Record<string, number>;
    pairsPerSecDelivered: number;
    pairsPerSecAnswered: number;
    secondsUntilAllDelivered: number;
    sendToDeliveredMsP50: number;
    sendToDeliveredMsP99: number;
    errors: Record<string, number>;
    cpuPercentOfOneCore: { A: number; B: number };
    /** On PostgreSQL: both databases' backends, percent of one core (bench/lib/pg-cpu.ts). */
    databaseCpuPercentOfOneCore?: number;
    /** Database commits per pair on each server, and writes grouped into each commit. */
    commitsPerPair: { A: number; B: number };
    writesPerCommit: { A: number; B: number };
    /**
     * Read and write syscalls per pair on each server, all its threads (Linux's /proc/<pid>/io: socket
     * reads and writes, the WAL's pwrites, the checkpoint's preads and pwrites, fsyncs); null off Linux.
     */
    syscallsPerPair: { A: SyscallCounts | null; B: SyscallCounts | null };
  };
  fixedRate: {
    targetPairsPerSec: number;
    achievedSendRate: number;
    seconds: number;
    pairs: number;
    sendToDeliveredMsP50: number;
    sendToDeliveredMsP99: number;
    sendToDeliveredMsMax: number;
    errors: Record<string, number>;
    cpuPercentOfOneCore: { A: number; B: number };
    /** On PostgreSQL: both databases' backends, percent of one core (bench/lib/pg-cpu.ts). */
    databaseCpuPercentOfOneCore?: number;
    /** Database commits per pair on each server. */
    commitsPerPair: { A: number; B: number };
    /** The main thread's GC pauses on each server during the phase (worker threads' GCs pause only them). */
    gcPauses: { A: GcPauses; B: GcPauses };
    /**
     * How long each server's main thread was ready to run but waited for a core (Linux's
     * /proc/<pid>/task/<pid>/schedstat), in ms during the phase; null where that file cannot be read.
     */
    mainThreadWaitedForCoreMs: { A: number | null; B: number | null };
    /** With `tail`: what the pairs at or above the p99 overlapped. */
    tail?: TailReport;
  };
  peakRssMiB: { A: number; B: number };
}

/** Pauses of one GC kind: how many, their total, and how many took 10 ms or more. */
export interface GcKindPauses {
  count: number;
  ms: number;
  atLeast10ms: number;
}

/** Young-generation collections (scavenges) and full mark-compact collections. */
export type GcPauses = { minor: GcKindPauses; major: GcKindPauses };

/** When each pair was sent and when its sender learnt it was delivered. */
export class Tracker {
  private readonly sentAt = new Map<string, number>();
  private readonly deliveredAt = new Map<string, number>();
  private waiter: (() => void) | null = null;
  readonly errors: Record<string, number> = {};

  constructor(private readonly deadlineMs = 60_000) {}

  sent(key: string): void {
    this.sentAt.set(key, performance.now());
  }

  delivered(key: string): void {
    // A pair of an earlier phase (a late event for a warm-up pair) is not this tracker's.
    if (this.deliveredAt.has(key) || !this.sentAt.has(key)) return;
    this.deliveredAt.set(key, performance.now());
    if (this.deliveredAt.size === this.sentAt.size) this.waiter?.();
  }

  failed(code: string): void {
    this.errors[code] = (this.errors[code] ?? 0) + 1;
  }

  /** Resolves with the time the last pair was delivered, once every sent pair is. */
  async allDelivered(): Promise<number> {
    const all = new Promise<void>((resolve) => {
      this.waiter = resolve;
      if (this.deliveredAt.size >= this.sentAt.size) resolve();
    });
    // The deadline's timer is cancelled once all are in: a pending one would keep the bench's process alive.
    const deadline = new AbortController();
    const timeout = sleep(this.deadlineMs, undefined, { signal: deadline.signal }).then(() => {
      throw new Error(
        `only ${this.deliveredAt.size} of ${this.sentAt.size} pairs delivered within ${this.deadlineMs} ms`,
      );
    });
    timeout.catch(() => {}); // rejected with AbortError when cancelled
    try {
      await Promise.race([all, timeout]);
    } finally {
      deadline.abort();
    }
    return Math.max(...this.deliveredAt.values());
  }

  /** Each pair's send time (ms since the epoch) and latency, for bench/lib/tail.ts. */
  timings(): PairTiming[] {
    return [...this.sentAt].map(([k, t]) => ({
      sentAtMs: performance.timeOrigin + t,
      ms: this.deliveredAt.get(k)! - t,
    }));
  }

  /** When each delivered pair was delivered (performance.now()), ascending. */
  deliveredTimes(): number[] {
    return ascending([...this.deliveredAt.values()]);
  }

  latenciesMs(): number[] {
    return ascending(this.timings().map((t) => t.ms));
  }
}

/**
 * Sends one pair and records its answer; a `delivered` answer counts as the delivery. Resolves with the
 * answer's delivery state, or null for an error answer (counted by the tracker).
 */
export async function send(client: ShineClient, pair: BuiltPair, tracker: Tracker): Promise<DeliveryState | null> {
  const key = messageKeyOf(pair.outgoing);
  tracker.sent(key);
  try {
    const answer = await client.request('SendMessagePair', {
      incomingBlobB64: pair.incomingBlobB64,
      outgoingBlobB64: pair.outgoingBlobB64,
    });
    if (answer.deliveryState === 'delivered') tracker.delivered(key);
    return answer.deliveryState;
  } catch (err) {
    tracker.failed(err instanceof ShineClientError ? err.code : String(err));
    tracker.delivered(key); // counted as an error, not waited for
    return null;
  }
}

interface ServerStats {
  commits: number;
  writes: number;
  gc: GcPauses;
  /** Delivery attempts so far: first attempts by outcome, then the worker's by outcome. */
  attempts: Record<string, number>;
}

const ATTEMPT_SERIES: Record<string, string> = {
  firstDelivered: 'shine_delivery_first_attempts_total{outcome="delivered"}',
  firstAccepted: 'shine_delivery_first_attempts_total{outcome="accepted"}',
  workerDelivered: 'shine_delivery_attempts_total{outcome="delivered"}',
  workerRetry: 'shine_delivery_attempts_total{outcome="retry"}',
  workerExtra: 'shine_delivery_attempts_total{outcome="extra"}',
};

/** A server's /metrics now, as a reader of one sample's value by its series (`name{labels}`), 0 when absent. */
export async function scrape(s: ServerProcess): Promise<(series: string) => number> {
  // Once more on a failure: the first try may reuse a kept-alive socket the server has just closed.
  const get = async (): Promise<string> => (await fetch(`${s.httpUrl}/metrics`)).text();
  const text = await get().catch(get);
  return (series) => {
    const at = text.indexOf(`\n${series} `);
    return at < 0 ? 0 : Number(text.slice(at + series.length + 2, text.indexOf('\n', at + 1)));
  };
}

/**
 * A server's database commits and committed writes so far, and its GC pauses since the first call, from
 * its /metrics (the process metrics start at the first scrape and are rendered at most once a second).
 */
async function serverStats(s: ServerProcess): Promise<ServerStats> {
  const read = await scrape(s);
  return {
    commits: read('shine_db_commits_total'),
    writes: read('shine_db_writes_total'),
    gc: gcPausesIn(read),
    attempts: Object.fromEntries(Object.entries(ATTEMPT_SERIES).map(([k, series]) => [k, read(series)])),
  };
}

/** A server's main-thread GC pauses so far, from a scrape of its /metrics (prom-client's `nodejs_gc_duration_seconds`). */
export function gcPausesIn(read: (series: string) => number): GcPauses {
  const gc = (kind: string): GcKindPauses => {
    const count = read(`nodejs_gc_duration_seconds_count{kind="${kind}"}`);
    return {
      count,
      ms: read(`nodejs_gc_duration_seconds_sum{kind="${kind}"}`) * 1000,
      atLeast10ms: count - read(`nodejs_gc_duration_seconds_bucket{le="0.01",kind="${kind}"}`),
    };
  };
  return { minor: gc('minor'), major: gc('major') };
}

/** The delivery attempts a server made between two readings of its stats. */
function attemptsBetween(before: ServerStats, after: ServerStats): Record<string, number> {
  return Object.fromEntries(Object.keys(ATTEMPT_SERIES).map((k) => [k, after.attempts[k]! - before.attempts[k]!]));
}

export function gcBetween(before: GcPauses, after: GcPauses): GcPauses {
  const kind = (b: GcKindPauses, a: GcKindPauses): GcKindPauses => ({
    count: a.count - b.count,
    ms: Number((a.ms - b.ms).toFixed(1)),
    atLeast10ms: a.atLeast10ms - b.atLeast10ms,
  });
  return { minor: kind(before.minor, after.minor), major: kind(before.major, after.major) };
}

/** Time the process's main thread has spent runnable but not running (ns → ms), or null off Linux. */
export function runQueueWaitMs(pid: number): number | null {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
  } catch {
    return null;
  }
}

interface SyscallCounts {
  reads: number;
  writes: number;
}

/** The read and write syscalls the process (all its threads) has made so far, or null off Linux. */
export function syscallCounts(pid: number): SyscallCounts | null {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    const field = (name: string): number => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(io)?.[1] ?? NaN);
    return { reads: field('syscr'), writes: field('syscw') };
  } catch {
    return null;
  }
}

/** One figure per server, named A and B. */
function byServer<T>(servers: ServerProcess[], figure: (s: ServerProcess, i: number) => T): { A: T; B: T } {
  const [a, b] = servers.map(figure);
  return { A: a!, B: b! };
}

/**
 * What a per-process reading (of Linux's /proc) changed by on each server since `before`, which holds the
 * readings taken then; null where either reading could not be taken.
 */
function sinceBefore<T, R>(
  before: (T | null)[],
  servers: ServerProcess[],
  read: (pid: number) => T | null,
  change: (now: T, was: T) => R,
): { A: R | null; B: R | null } {
  return byServer(servers, (s, i) => {
    const now = read(s.pid);
    const was = before[i] ?? null;
    return now === null || was === null ? null : change(now, was);
  });
}

/** The databases' backends' CPU since `meter` was marked, as a phase's field (none off PostgreSQL). */
async function databaseCpu(
  kind: 'sqlite' | 'postgres',
  meter: BackendCpuMeter,
  wallMs: number,
): Promise<{ databaseCpuPercentOfOneCore?: number }> {
  if (kind !== 'postgres') return {};
  return { databaseCpuPercentOfOneCore: Math.round(((await meter.msSinceMark()) / wallMs) * 100) };
}

/** A ratio of each server's commits and writes between two readings of its stats, to two decimals. */
function commitRatio(
  before: ServerStats[],
  after: ServerStats[],
  ratio: (d: { commits: number; writes: number }) => number,
): { A: number; B: number } {
  const per = (i: number): number =>
    Number(
      ratio({ commits: after[i]!.commits - before[i]!.commits, writes: after[i]!.writes - before[i]!.writes }).toFixed(
        2,
      ),
    );
  return { A: per(0), B: per(1) };
}

function cpuPercent(servers: ServerProcess[], before: number[], wallMs: number): { A: number; B: number } {
  return byServer(servers, (s, i) => Math.round(((s.cpuMs() - before[i]!) / wallMs) * 100));
}

/** A (`alpha`) and B (`beta`) as the federated benches run them, with what they need to report and stop. */
export interface BenchServers {
  a: ServerProcess;
  b: ServerProcess;
  servers: ServerProcess[];
  /** On PostgreSQL, each server's database URL (empty on SQLite). */
  dbUrls: string[];
  /** The durability line of the bench's JSON. */
  durability(): Promise<string>;
  close(): Promise<void>;
}

/**
 * Starts A and B on loopback (SHINE_SERVER_LOGIN alpha and beta, each the other's peer) with the
 * per-connection rate limit lifted and `config` added to their config file; on PostgreSQL each on a fresh
 * database of its own that waits for the WAL flush at each commit.
 */
export async function startBenchServers(opts: {
  sync: 'full' | 'normal';
  db?: 'sqlite' | 'postgres';
  config?: Record<string, unknown>;
  env?: Record<string, string>;
  /**
   * A round trip between A and B (bench/lib/delay-link.ts): each server's descriptor names a relay in front of
   * it that holds every chunk half this long each way, so the other's calls take that long. 0: they call
   * each other directly.
   */
  rttMs?: number;
}): Promise<BenchServers> {
  const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
  writeFileSync(configFile, JSON.stringify({ ...UNLIMITED_RATE, ...opts.config }));
  const kind = opts.db ?? 'sqlite';
  const dbs =
    kind === 'postgres'
      ? await Promise.all([0, 1].map(() => freshTestDb(dirname(configFile), 'postgres', { durable: true })))
      : [];
  const dbEnv = (i: number): Record<string, string> => (dbs[i] ? { SHINE_DB: dbs[i].url } : {});
  const rttMs = opts.rttMs ?? 0;
  const ports = await Promise.all([0, 1].map(() => freePort()));
  const links = rttMs > 0 ? await Promise.all(ports.map((port) => startDelayLink(port, rttMs / 2))) : [];
  const closeLinks = async (): Promise<void> => {
    await Promise.all(links.map((l) => l[Symbol.asyncDispose]()));
  };
  const servers = await startFederatedProcesses(
    ['alpha', 'beta'].map((serverLogin, i) => ({
      serverLogin,
      env: dbEnv(i),
      port: ports[i]!,
      ...(links[i] ? { publicWsUrl: links[i].wsUrl } : {}),
    })),
    { SHINE_SQLITE_SYNC: opts.sync, SHINE_CONFIG_FILE: configFile, ...opts.env },
  ).catch(async (err: unknown) => {
    await Promise.all(dbs.map((d) => d.drop()));
    await closeLinks();
    throw err;
  });
  return {
    a: servers[0]!,
    b: servers[1]!,
    servers,
    dbUrls: dbs.map((d) => d.url),
    durability: async () =>
      kind === 'postgres'
        ? `PostgreSQL ${await postgresDurability(dbs[0]!.url)} (both servers)`
        : opts.sync === 'full'
          ? 'SQLite WAL + synchronous=FULL (both servers)'
          : 'SQLite WAL + synchronous=NORMAL (both servers)',
    close: async () => {
      await Promise.all(servers.map((s) => s.close()));
      await Promise.all(dbs.map((d) => d.drop()));
      await closeLinks();
    },
  };
}

/** alice<i> (senders, on A) and bob<i> (recipients, on B). */
export function benchUsers(n: number): { senders: Identity[]; recipients: Identity[] } {
  return {
    senders: Array.from({ length: n }, (_, i) => createIdentity(`alice${i}`)),
    recipients: Array.from({ length: n }, (_, i) => createIdentity(`bob${i}`)),
  };
}

/**
 * Registers each bob on B, connects each alice to A (their clients, in order) with every `delivered` event
 * passed to onDelivered, and sends one warm-up message from each alice to her bob: A imports each bob's
 * profile, B each alice's, and the server-to-server socket opens.
 */
export async function connectBenchUsers(
  { a, b }: Pick<BenchServers, 'a' | 'b'>,
  { senders, recipients }: { senders: Identity[]; recipients: Identity[] },
  onDelivered: (outgoingKey: string) => void,
): Promise<ShineClient[]> {
  const clients: ShineClient[] = [];
  try {
    for (const bob of recipients) clients.push(await connectIdentity(b.wsUrl, bob, ['beta'], 'bench'));
    for (const c of clients.splice(0)) await c.close();
    for (const alice of senders) clients.push(await connectIdentity(a.wsUrl, alice, ['alpha'], 'bench'));
    for (const c of clients)
      c.on('DmDeliveryStateChanged', (e) => e.deliveryState === 'delivered' && onDelivered(e.outgoingKey));
    await Promise.all(clients.map((c, i) => warmUp(c, recipients[i]!.login)));
    return clients;
  } catch (err) {
    await Promise.all(clients.map((c) => c.close()));
    throw err;
  }
}

/**
 * A first message to `to`. A's import of an unknown recipient runs on after the request's deadline
 * (firstAttemptWaitMs), so a USER_NOT_FOUND from a short deadline is asked again until the import is in.
 */
async function warmUp(c: ShineClient, to: string): Promise<void> {
  for (let tries = 1; ; tries++) {
    try {
      await c.sendText(to, 'warm-up');
      return;
    } catch (err) {
      if (!(err instanceof ShineClientError && err.code === 'USER_NOT_FOUND') || tries === 50) throw err;
      await sleep(100);
    }
  }
}

/** Starts A and B, runs the warm-up (if any), the throughput phase then the fixed-rate phase, stops both servers. */
export async function runFederatedSend(opts: FederatedSendOptions): Promise<FederatedSendResult> {
  const { clients: CLIENTS, pairs: PAIRS, window: WINDOW, rate: RATE, seconds: SECONDS } = opts;
  const WARMUP = opts.warmup ?? 0;
  const tail = opts.tail ? startTailRecording() : null;
  const kind = opts.db ?? 'sqlite';
  const started = await startBenchServers({
    sync: opts.sync,
    db: kind,
    rttMs: opts.rttMs ?? 0,
    ...(tail ? { env: tail.serverEnv } : {}),
  });
  const { a, b, servers } = started;
  let clients: ShineClient[] = [];
  try {
    const { senders, recipients } = benchUsers(CLIENTS);
    // Signing and encryption are the clients' work: all done before the clocks start, and before the
    // senders connect (building many pairs blocks this process longer than the servers wait for a pong).
    const base = Date.now() - 60_000;
    const order = (i: number, k: number): PairOrder => ({
      from: i,
      to: i,
      text: `message ${k} from alice${i}`,
      timeMs: base + k,
    });
    const total = RATE * SECONDS;
    const orders = [
      ...senders.flatMap((_, i) => Array.from({ length: PAIRS }, (_, k) => order(i, k))),
      ...Array.from({ length: total }, (_, n) => order(n % CLIENTS, PAIRS + Math.floor(n / CLIENTS))),
      // Keys below the burst's: a message's key is its sender, recipient, timeMs and nonce.
      ...senders.flatMap((_, i) => Array.from({ length: WARMUP }, (_, k) => order(i, -1 - k))),
    ];
    const built = await buildTextPairs(senders, recipients, orders);
    const burst = perClient(built, CLIENTS, PAIRS);
    const paced = built.slice(CLIENTS * PAIRS, CLIENTS * PAIRS + total);
    const warm = perClient(built, CLIENTS, WARMUP, CLIENTS * PAIRS + total);

    let tracker = new Tracker();
    clients = await connectBenchUsers(started, { senders, recipients }, (key) => tracker.delivered(key));
    // A failed warm-up pair counts as delivered: its errors are printed with the throughput.
    let warmupErrors: Record<string, number> = {};
    if (WARMUP > 0) {
      await inLanes(CLIENTS, WARMUP, WINDOW, (i, k) => send(clients[i]!, warm[i]![k]!, tracker));
      await tracker.allDelivered();
      warmupErrors = tracker.errors;
      tracker = new Tracker();
    }

    // 1. Throughput until delivered.
    let cpu0 = servers.map((s) => s.cpuMs());
    const sys0 = servers.map((s) => syscallCounts(s.pid));
    const commits0 = await Promise.all(servers.map(serverStats));
    const dbCpu = await backendCpuMeter(started.dbUrls);
    dbCpu.mark();
    let t0 = performance.now();
    await inLanes(CLIENTS, PAIRS, WINDOW, (i, k) => send(clients[i]!, burst[i]![k]!, tracker));
    const answeredMs = performance.now() - t0;
    let doneMs = (await tracker.allDelivered()) - t0;
    const perPair = (n: number): number => Number((n / (CLIENTS * PAIRS)).toFixed(1));
    const syscalls = sinceBefore(sys0, servers, syscallCounts, (now, was) => ({
      reads: perPair(now.reads - was.reads),
      writes: perPair(now.writes - was.writes),
    }));
    const commits1 = await Promise.all(servers.map(serverStats));
    const throughput = {
      pairs: CLIENTS * PAIRS,
      clients: CLIENTS,
      window: WINDOW,
      warmupPerClient: WARMUP,
      warmupErrors,
      pairsPerSecDelivered: Math.round((CLIENTS * PAIRS) / (doneMs / 1000)),
      pairsPerSecAnswered: Math.round((CLIENTS * PAIRS) / (answeredMs / 1000)),
      secondsUntilAllDelivered: Number((doneMs / 1000).toFixed(2)),
      sendToDeliveredMsP50: pct(tracker.latenciesMs(), 0.5),
      sendToDeliveredMsP99: pct(tracker.latenciesMs(), 0.99),
      errors: tracker.errors,
      cpuPercentOfOneCore: cpuPercent(servers, cpu0, doneMs),
      ...(await databaseCpu(kind, dbCpu, doneMs)),
      commitsPerPair: commitRatio(commits0, commits1, (d) => d.commits / (CLIENTS * PAIRS)),
      writesPerCommit: commitRatio(commits0, commits1, (d) => d.writes / d.commits),
      syscallsPerPair: syscalls,
      attemptsOnA: attemptsBetween(commits0[0]!, commits1[0]!),
    };

    // 2. Latency at a fixed rate, round-robin over the senders.
    tracker = new Tracker();
    cpu0 = servers.map((s) => s.cpuMs());
    const waited0 = servers.map((s) => runQueueWaitMs(s.pid));
    const fixedDbCpu = await backendCpuMeter(started.dbUrls);
    fixedDbCpu.mark();
    t0 = performance.now();
    const inFlight: Promise<unknown>[] = [];
    for (let n = 0; n < total; n++) {
      const due = t0 + (n * 1000) / RATE;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      inFlight.push(send(clients[n % CLIENTS]!, paced[n]!, tracker));
    }
    const sendingMs = performance.now() - t0;
    await Promise.all(inFlight);
    doneMs = (await tracker.allDelivered()) - t0;
    const stats2 = await Promise.all(servers.map(serverStats));
    const lat = tracker.latenciesMs();
    const fixedRate = {
      targetPairsPerSec: RATE,
      achievedSendRate: Math.round(total / (sendingMs / 1000)),
      seconds: SECONDS,
      pairs: total,
      sendToDeliveredMsP50: pct(lat, 0.5),
      sendToDeliveredMsP99: pct(lat, 0.99),
      sendToDeliveredMsMax: Number(lat.at(-1)!.toFixed(1)),
      errors: tracker.errors,
      cpuPercentOfOneCore: cpuPercent(servers, cpu0, doneMs),
      ...(await databaseCpu(kind, fixedDbCpu, doneMs)),
      commitsPerPair: commitRatio(commits1, stats2, (d) => d.commits / total),
      gcPauses: { A: gcBetween(commits1[0]!.gc, stats2[0]!.gc), B: gcBetween(commits1[1]!.gc, stats2[1]!.gc) },
      attemptsOnA: attemptsBetween(commits1[0]!, stats2[0]!),
      mainThreadWaitedForCoreMs: sinceBefore(waited0, servers, runQueueWaitMs, (now, was) => Math.round(now - was)),
      ...(tail
        ? {
            tail: tailReport(
              tracker.timings(),
              { A: a.pid, B: b.pid, client: process.pid, idle: tail.idlePid },
              tail.dir,
            ),
          }
        : {}),
    };

    return {
      durability: await started.durability(),
      db: kind,
      sqliteWriter: kind === 'sqlite' ? sqliteWriter() : null,
      throughput,
      fixedRate,
      peakRssMiB: { A: Math.round(a.peakRssKiB() / 1024), B: Math.round(b.peakRssKiB() / 1024) },
    };
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await started.close();
    tail?.stop();
  }
}
