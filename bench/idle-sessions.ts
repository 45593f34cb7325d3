/**
 * Idle logged-in sessions held by one server (issue 12, target 5): server RSS per session and whether
 * a small request load answers as fast with them held as without.
 *
 * 1. One `shine serve` (SQLite, WAL + synchronous FULL), per-connection rate limit lifted.
 * 2. Baseline: ACTIVE clients send GetDirectMessages (a 10-message dialog) at RATE requests/s in total
 *    for LOAD_SECONDS, open loop; answer latency p50/p99, the server's event-loop lag and GC pauses;
 *    then a full GC in the server (through the inspector it is started with) and its VmRSS.
 * 3. SESSIONS users are registered and logged in, each on its own socket, from PROCS child processes
 *    (bench/lib/idle-holder.ts), which then hold them silent.
 * 4. The same GC and RSS reading → KiB per session; then the same load again.
 *
 * The default load lasts 35 s so each run spans a whole 30 s ping interval of the server's heartbeat,
 * which is part of what holding sessions costs.
 *
 * Env: BENCH_SESSIONS (20000), BENCH_PROCS (2), BENCH_ACTIVE (4), BENCH_RATE (200), BENCH_LOAD_SECONDS (35).
 * Needs SESSIONS + 1 000 open files per process: below that it re-runs itself under `prlimit` with the
 * soft limit raised up to the hard one; if that is still short, it holds as many as the server's limit
 * allows and prints both counts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { ShineClient } from '../src/client/client.js';
import { createIdentity, makeProfile } from '../src/client/identity.js';
import { freePort, startServerProcess } from '../test/helpers/server-process.js';
import type { ServerProcess } from '../test/helpers/server-process.js';
import type { HolderReport, HolderTask } from './lib/idle-holder.js';
import { machine } from './lib/machine.js';
import { UNLIMITED_RATE } from './lib/send-load.js';

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 20_000);
const PROCS = Number(process.env.BENCH_PROCS ?? 2);
const ACTIVE = Number(process.env.BENCH_ACTIVE ?? 4);
const RATE = Number(process.env.BENCH_RATE ?? 200);
const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 35);
const SERVER_LOGIN = 'local';

/** Open files this process and its children (the server, the holders) need. */
const NOFILE = SESSIONS + 1_000;

/** The soft and hard limit on open files of a process, from /proc. */
function nofile(pid: number | 'self'): { soft: number; hard: number } {
  const m = /Max open files\s+(\S+)\s+(\S+)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'));
  const n = (s: string | undefined): number => (s === 'unlimited' ? Infinity : Number(s ?? 0));
  return { soft: n(m?.[1]), hard: n(m?.[2]) };
}

const own = nofile('self');
if (own.soft < NOFILE && own.hard > own.soft && !process.env.BENCH_IDLE_RELAUNCHED) {
  // Node cannot raise its own soft limit; prlimit starts this bench again with it raised as far as the
  // hard limit allows (raising the hard limit needs CAP_SYS_RESOURCE). The server and the holders inherit it.
  const limit = Math.min(NOFILE, own.hard);
  const r = spawnSync(
    'prlimit',
    [`--nofile=${limit}:${own.hard}`, process.execPath, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: 'inherit', env: { ...process.env, BENCH_IDLE_RELAUNCHED: '1' } },
  );
  if (!r.error) process.exit(r.status ?? 1);
  console.error(`idle-sessions: prlimit failed (${r.error.message}); going on with ${own.soft} open files`);
}

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]);
}

const mib = (kib: number): number => Number((kib / 1024).toFixed(1));

/** One unlabelled sample from the server's /metrics, or null. */
async function metric(server: ServerProcess, name: string): Promise<number | null> {
  const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

/** The server's event-loop lag since the previous scrape (prom-client resets its histogram on every scrape). */
async function eventLoopLagMs(server: ServerProcess): Promise<{ p99: number | null; max: number | null }> {
  const ms = (s: number | null): number | null => (s === null ? null : Number((s * 1000).toFixed(1)));
  return {
    p99: ms(await metric(server, 'nodejs_eventloop_lag_p99_seconds')),
    max: ms(await metric(server, 'nodejs_eventloop_lag_max_seconds')),
  };
}

/** Garbage collections so far: pause seconds in all, and how many paused 100 ms or more, over all kinds. */
async function gcPauses(server: ServerProcess): Promise<{ seconds: number; over100ms: number }> {
  const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
  const sum = (re: RegExp): number => [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);
  const count = sum(/^nodejs_gc_duration_seconds_count\{[^}]*\} (\S+)$/gm);
  const upTo100ms = sum(/^nodejs_gc_duration_seconds_bucket\{le="0\.1",[^}]*\} (\S+)$/gm);
  return { seconds: sum(/^nodejs_gc_duration_seconds_sum\{[^}]*\} (\S+)$/gm), over100ms: count - upTo100ms };
}

async function heapUsedMiB(server: ServerProcess): Promise<number | null> {
  const b = await metric(server, 'nodejs_heap_size_used_bytes');
  return b === null ? null : mib(b / 1024);
}

/**
 * A full garbage collection in the server, through the inspector it was started with (the server has
 * no way to ask for one): what is left on the heap is what the server holds, not leftovers of setup.
 */
async function collectGarbage(inspectorPort: number): Promise<void> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json()) as {
    webSocketDebuggerUrl: string;
  }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await once(ws, 'open');
  ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' }));
  await once(ws, 'message');
  ws.close();
  await once(ws, 'close');
}

/**
 * Forces a full GC, then polls RSS every second until five readings in a row stay within 1 % of each
 * other (at most 60 s).
 */
async function steadyRssKiB(pid: number, inspectorPort: number): Promise<{ kib: number; waitedS: number }> {
  await collectGarbage(inspectorPort);
  const t0 = performance.now();
  const readings: number[] = [];
  for (;;) {
    readings.push(rssKiB(pid));
    const last = readings.slice(-5);
    const spread = (Math.max(...last) - Math.min(...last)) / Math.max(...last);
    const waitedS = Number(((performance.now() - t0) / 1000).toFixed(0));
    if ((last.length === 5 && spread < 0.01) || waitedS >= 60) return { kib: last.at(-1)!, waitedS };
    await new Promise((r) => setTimeout(r, 1000));
  }
}

interface Active {
  client: ShineClient;
  peer: string;
}

/** ACTIVE senders, each with a 10-message dialog with its own recipient. */
async function activeClients(wsUrl: string): Promise<Active[]> {
  const out: Active[] = [];
  for (let i = 0; i < ACTIVE; i++) {
    const me = createIdentity(`active${i}`);
    const peer = createIdentity(`peer${i}`);
    const client = await ShineClient.connect(wsUrl, { WebSocket: WebSocket as never });
    await client.register(makeProfile(me, [SERVER_LOGIN], 1, Date.now()));
    await client.register(makeProfile(peer, [SERVER_LOGIN], 1, Date.now()));
    await client.login(me, 'bench');
    for (let k = 0; k < 10; k++) await client.sendText(peer.login, `message ${k}`);
    out.push({ client, peer: peer.login });
  }
  return out;
}

interface LoadResult {
  requests: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  eventLoopLagP99Ms: number | null;
  eventLoopLagMaxMs: number | null;
  gcPauseMs: number;
  gcPausesOver100ms: number;
}

/**
 * RATE requests/s spread evenly over the clients, each sent at its scheduled time whether or not the
 * previous answer is back (open loop: a slow answer does not thin out the load that measures it).
 * Latency is from the scheduled time, so a stalled sender counts against the server, not for it.
 */
async function runLoad(server: ServerProcess, active: Active[]): Promise<LoadResult> {
  await eventLoopLagMs(server);
  const gc0 = await gcPauses(server);
  const total = Math.round(RATE * LOAD_SECONDS);
  const intervalMs = 1000 / RATE;
  const latencies: number[] = [];
  const t0 = performance.now() + 50;
  const calls: Promise<void>[] = [];
  for (let k = 0; k < total; k++) {
    const at = t0 + k * intervalMs;
    const wait = at - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const { client, peer } = active[k % active.length]!;
    calls.push(
      client
        .call('GetDirectMessages', { peerLogin: peer, beforeTimeMs: 0, beforeMessageKey: '', limit: 20 })
        .then(() => void latencies.push(performance.now() - at)),
    );
  }
  await Promise.all(calls);
  // Both lag figures come from one rendering: /metrics serves the process metrics of the last second again.
  const lag = await eventLoopLagMs(server);
  const gc1 = await gcPauses(server);
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number =>
    Number(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]!.toFixed(2));
  return {
    requests: total,
    p50Ms: pct(0.5),
    p99Ms: pct(0.99),
    maxMs: pct(1),
    eventLoopLagP99Ms: lag.p99,
    eventLoopLagMaxMs: lag.max,
    gcPauseMs: Math.round((gc1.seconds - gc0.seconds) * 1000),
    gcPausesOver100ms: gc1.over100ms - gc0.over100ms,
  };
}

/** Starts the holders; resolves once all SESSIONS sessions are logged in, with the processes holding them. */
async function openIdleSessions(
  wsUrl: string,
  sessions: number,
  procs: number,
): Promise<{ seconds: number; stop: () => void }> {
  const t0 = performance.now();
  const per = Math.ceil(sessions / procs);
  const children = Array.from({ length: procs }, (_, p) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/lib/idle-holder.ts'], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const task: HolderTask = {
      wsUrl,
      serverLogin: SERVER_LOGIN,
      from: p * per,
      count: Math.max(0, Math.min(per, sessions - p * per)),
      concurrency: 32,
    };
    child.send(task);
    return child;
  });
  const stop = (): void => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  };
  try {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve, reject) => {
            child.on('message', (msg: HolderReport) => {
              if ('ready' in msg) resolve();
              else if ('error' in msg) reject(new Error(`holder: ${msg.error}`));
            });
            child.once('exit', (code) => reject(new Error(`holder exited with ${code}`)));
          }),
      ),
    );
  } catch (err) {
    stop();
    throw err;
  }
  return { seconds: Number(((performance.now() - t0) / 1000).toFixed(1)), stop };
}

const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
const inspectorPort = await freePort();
await using server = await startServerProcess({
  nodeArgs: [`--inspect=127.0.0.1:${inspectorPort}`],
  env: { SHINE_SQLITE_SYNC: 'full', SHINE_LOG_LEVEL: 'warn', SHINE_CONFIG_FILE: configFile },
});
const active = await activeClients(server.wsUrl);
const loadAvgBefore = loadavg().map((x) => Number(x.toFixed(2)));
const before = await runLoad(server, active);
const rssBefore = await steadyRssKiB(server.pid, inspectorPort);
const heapBefore = await heapUsedMiB(server);
// Each session is one socket, so one file, in the server: what its limit leaves (minus a margin for
// SQLite's files and the like) caps the count, and the output says so when it did.
const serverFds = readdirSync(`/proc/${server.pid}/fd`).length;
const sessions = Math.min(SESSIONS, nofile(server.pid).soft - serverFds - 64);
// Each holder keeps its share under its own limit (with room for its own files).
const procs = Math.max(PROCS, Math.ceil(sessions / (nofile('self').soft - 200)));
const opened = await openIdleSessions(server.wsUrl, sessions, procs);
try {
  const rssHeld = await steadyRssKiB(server.pid, inspectorPort);
  const heapHeld = await heapUsedMiB(server);
  const held = await runLoad(server, active);
  const sessionsOpen = await metric(server, 'shine_sessions_open');
  console.log(
    JSON.stringify({
      bench: 'idle-sessions',
      date: new Date().toISOString(),
      machine: machine(),
      loadAverageBefore: loadAvgBefore,
      durability: 'WAL+synchronous=FULL',
      config: 'rateLimit lifted (UNLIMITED_RATE); no other limit raised (the server has no session or connection cap)',
      sessionsRequested: SESSIONS,
      sessions,
      serverOpenFilesLimit: nofile(server.pid).soft,
      serverSessionsOpen: sessionsOpen,
      holderProcesses: procs,
      setupSeconds: opened.seconds,
      rssBeforeMiB: mib(rssBefore.kib),
      rssHeldMiB: mib(rssHeld.kib),
      rssSteadyAfterS: rssHeld.waitedS,
      heapUsedBeforeMiB: heapBefore,
      heapUsedHeldMiB: heapHeld,
      kibPerSession: Number(((rssHeld.kib - rssBefore.kib) / sessions).toFixed(2)),
      load: `${ACTIVE} clients, GetDirectMessages (10-message dialog, limit 20), ${RATE}/s for ${LOAD_SECONDS} s, open loop`,
      before,
      held,
      p99HeldOverBefore: Number((held.p99Ms / before.p99Ms).toFixed(2)),
    }),
  );
} finally {
  opened.stop();
  await Promise.all(active.map((a) => a.client.close()));
}
