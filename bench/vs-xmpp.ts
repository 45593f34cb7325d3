/**
 * SHiNE against Prosody in one run (issue 12's targets), one after the other on the same machine:
 *  1. Prosody, the XMPP peer's two federated domains (a.localhost → b.localhost over s2s, default
 *     in-memory profile): its bench.mjs phases `tput_s2s_receipts` (closed-loop cross-domain throughput
 *     until every XEP-0184 receipt is back at the sender) and `lat_s2s` (open loop at RATE msg/s for
 *     SECONDS s, one-way send → received p50/p99). The servers are restarted first (`./stop.sh &&
 *     ./setup.sh`, as the peer's README asks for comparable numbers) unless BENCH_XMPP_RESTART=0.
 *  2. SHiNE, bench/lib/federated-load.ts: A → B federated SendMessagePair, throughput until the sender
 *     learns `delivered`, and send → delivered p50/p99 at RATE pairs/s for SECONDS s; per-connection
 *     rate limit lifted on both servers (no 429s measured); SQLite WAL + synchronous=FULL, signed. The
 *     throughput load has Prosody's shape: 20 000 pairs with 1 000 in flight (20 clients × 50), after a
 *     warm-up of 250 pairs per client that is not counted, so both sides are measured at their steady rate
 *     (docs/performance.md, thirty-third session). Then, on servers of their own, the load of the earlier
 *     sessions: 3 000 pairs, 20 × 4 in flight, no warm-up (its throughput printed as coldThroughput), followed
 *     by the latency phase.
 *  Between the two, the disk's floor (bench/lib/fsync-floor.ts): one fdatasync's p50/p99 at RATE/s, and
 *  the p99 ratio target 2 could read at best while SHiNE's answers wait for fsyncs.
 * Prints ONE JSON line with both sides, each side's durability, and the ratios (each says which way it
 * reads). If the peer folder is missing or Prosody is not installed, the Prosody side is `skipped` with
 * the reason and the ratios are null; SHiNE is still measured.
 *
 * Env: BENCH_XMPP_DIR (/tmp/xmpp-peer: a writable copy of the XMPP peer folder, readable by user
 * prosody), BENCH_XMPP_PROFILE (default; `durable`: the peer's SQLite + mod_mam profile, restarted with
 * empty archives, for a comparison in which both sides keep every message on disk — not the one issue
 * 12's targets name), BENCH_XMPP_RESTART (1), BENCH_RATE (200), BENCH_SECONDS (20, both sides), BENCH_CLIENTS
 * (20), BENCH_PAIRS (1000 per client), BENCH_WINDOW (50), BENCH_WARMUP (250 per client): SHiNE's throughput
 * load, as in bench/federated-send.ts.
 */
import { machine } from './lib/machine.js';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { runFederatedSend } from './lib/federated-load.js';
import { fsyncFloor } from './lib/fsync-floor.js';

const XMPP_DIR = process.env.BENCH_XMPP_DIR ?? '/tmp/xmpp-peer';
const RESTART = process.env.BENCH_XMPP_RESTART !== '0';
const RATE = Number(process.env.BENCH_RATE ?? 200);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20);
/** The peer's profile: `default` (in memory; issue 12's targets name it) or `durable` (SQLite + archive). */
const PROFILE = process.env.BENCH_XMPP_PROFILE === 'durable' ? 'durable' : 'default';
const PROSODY_DURABILITY =
  PROFILE === 'durable'
    ? "durable profile: SQLite storage (journal_mode=DELETE, synchronous=FULL) and mod_mam archiving every message, one commit per message on the sender's server before it is routed and on the recipient's before it is delivered, receipts likewise; no group commit"
    : 'in memory: default profile, nothing written per message (internal file storage for accounts only, no archive, no offline store used)';

type ProsodySide =
  | { status: 'skipped'; reason: string; durability: string }
  | {
      status: 'measured' | 'failed';
      version: string | null;
      durability: string;
      error?: string;
      throughputWithReceiptsMsgPerSec: number | null;
      throughput: unknown;
      fixedRate: {
        rate: number;
        seconds: number;
        msgs: number | null;
        received: number | null;
        oneWayMsP50: number | null;
        oneWayMsP99: number | null;
        oneWayMsMax: number | null;
      };
    };

/** The part of bench.mjs's last stdout line read here (its README, "What bench.mjs measures"). */
interface XmppBenchOutput {
  peer_version?: string | null;
  error?: string;
  phases?: {
    tput_s2s_receipts?: {
      msgs: number;
      senders: number;
      window: number;
      seconds: number;
      throughput_msg_s: number | null;
      receipt_rtt_under_load?: { p50_ms?: number; p99_ms?: number };
      server_cpu_us_per_msg: number;
    };
    lat_s2s?: { msgs: number; received: number; p50_ms?: number; p99_ms?: number; max_ms?: number };
  };
}

/** Why the Prosody side cannot run here, or null if it can. */
function prosodyMissing(): string | null {
  if (!existsSync(join(XMPP_DIR, 'bench.mjs')))
    return `no XMPP peer at ${XMPP_DIR} (copy it: cp -r ../shared/peers/xmpp ${XMPP_DIR}, or set BENCH_XMPP_DIR)`;
  if (!existsSync(join(XMPP_DIR, 'node_modules', '@xmpp', 'client')))
    return `${XMPP_DIR} is not set up (run ./setup.sh there)`;
  if (spawnSync('sh', ['-c', 'command -v prosodyctl']).status !== 0)
    return `prosody is not installed (run ./setup.sh in ${XMPP_DIR})`;
  return null;
}

function runProsody(): ProsodySide {
  const missing = prosodyMissing();
  if (missing) return { status: 'skipped', reason: missing, durability: PROSODY_DURABILITY };
  if (RESTART) {
    // The durable profile starts from empty archives (its README's way), so every run writes the same: a
    // first start installs its packages and creates the databases (and users), then it starts again.
    const restart =
      PROFILE === 'durable'
        ? './stop.sh; PROFILE=durable ./setup.sh && ./stop.sh && ./durable-db.sh clear && PROFILE=durable ./setup.sh'
        : './stop.sh; ./setup.sh';
    const r = spawnSync('sh', ['-c', restart], {
      cwd: XMPP_DIR,
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 300_000,
    });
    if (r.status !== 0)
      return {
        status: 'skipped',
        reason: `${restart} failed (${r.status ?? r.signal})`,
        durability: PROSODY_DURABILITY,
      };
  }
  const args = ['bench.mjs', '--profile', PROFILE, '--phases', 'tput_s2s_receipts,lat_s2s'];
  args.push('--rate', String(RATE), '--duration', String(SECONDS));
  // A durable phase of 20 000 messages takes minutes (the peer's README: 150–190 msg/s with receipts).
  if (PROFILE === 'durable') args.push('--phase-timeout', '900');
  const r = spawnSync(process.execPath, args, {
    cwd: XMPP_DIR,
    stdio: ['ignore', 'pipe', 'inherit'],
    encoding: 'utf8',
    timeout: 2_000_000,
  });
  const last = r.stdout.trim().split('\n').at(-1) ?? '';
  let out: XmppBenchOutput;
  try {
    out = JSON.parse(last) as XmppBenchOutput;
  } catch {
    return {
      status: 'skipped',
      reason: `bench.mjs printed no JSON (exit ${r.status ?? r.signal})`,
      durability: PROSODY_DURABILITY,
    };
  }
  const t = out.phases?.tput_s2s_receipts;
  const l = out.phases?.lat_s2s;
  return {
    status: out.error || r.status !== 0 ? 'failed' : 'measured',
    version: out.peer_version ?? null,
    durability: PROSODY_DURABILITY,
    ...(out.error ? { error: String(out.error) } : {}),
    throughputWithReceiptsMsgPerSec: t?.throughput_msg_s ?? null,
    throughput: t
      ? {
          msgs: t.msgs,
          senders: t.senders,
          window: t.window,
          seconds: t.seconds,
          receiptRttUnderLoadMs: { p50: t.receipt_rtt_under_load?.p50_ms, p99: t.receipt_rtt_under_load?.p99_ms },
          serverCpuUsPerMsg: t.server_cpu_us_per_msg,
        }
      : null,
    fixedRate: {
      rate: RATE,
      seconds: SECONDS,
      msgs: l?.msgs ?? null,
      received: l?.received ?? null,
      oneWayMsP50: l?.p50_ms ?? null,
      oneWayMsP99: l?.p99_ms ?? null,
      oneWayMsMax: l?.max_ms ?? null,
    },
  };
}

const ratio = (num: number | null | undefined, den: number | null | undefined): number | null =>
  num == null || den == null || den === 0 ? null : Number((num / den).toFixed(2));

const started = new Date().toISOString();
const prosody = runProsody();
const floor = await fsyncFloor({ perSec: RATE });
// Throughput at Prosody's load shape (one second at the fixed rate: unused). The latency is measured on servers
// of their own, as in every earlier session: right after 20 000 pairs with 1 000 in flight its p99 read half
// again as long (docs/performance.md, thirty-third session).
const steady = await runFederatedSend({
  clients: Number(process.env.BENCH_CLIENTS ?? 20),
  pairs: Number(process.env.BENCH_PAIRS ?? 1000),
  window: Number(process.env.BENCH_WINDOW ?? 50),
  warmup: Number(process.env.BENCH_WARMUP ?? 250),
  rate: RATE,
  seconds: 1,
  sync: 'full',
});
// The load every earlier session measured both targets with; its throughput phase comes first, then the latency.
const shine = await runFederatedSend({
  clients: 20,
  pairs: 150,
  window: 4,
  rate: RATE,
  seconds: SECONDS,
  sync: 'full',
});
const cold = shine.throughput;
const p = prosody.status === 'skipped' ? null : prosody;
const throughputRatio = ratio(steady.throughput.pairsPerSecDelivered, p?.throughputWithReceiptsMsgPerSec);
const coldRatio = ratio(cold.pairsPerSecDelivered, p?.throughputWithReceiptsMsgPerSec);
const p99Ratio = ratio(p?.fixedRate.oneWayMsP99, shine.fixedRate.sendToDeliveredMsP99);
console.log(
  JSON.stringify({
    bench: 'vs-xmpp',
    started,
    finished: new Date().toISOString(),
    machine: machine(),
    // The targets name the default profile: with `durable`, targetMet is null.
    prosodyProfile: PROFILE,
    prosody,
    shine: {
      durability: `${shine.durability}, every pair signed by its sender and checked by both servers`,
      sqliteWriter: shine.sqliteWriter,
      throughputDeliveredPairsPerSec: steady.throughput.pairsPerSecDelivered,
      throughput: steady.throughput,
      coldThroughput: cold,
      fixedRate: shine.fixedRate,
      peakRssMiB: shine.peakRssMiB,
      steadyPeakRssMiB: steady.peakRssMiB,
      fsyncFloor: floor,
    },
    ratios: {
      throughput: {
        value: throughputRatio,
        reads:
          "SHiNE federated pairs/s until delivered, at Prosody's load shape after a warm-up (shine.throughput), ÷ Prosody s2s msg/s with receipts; ≥ 1.0 = SHiNE at least as fast (target 1)",
        targetMet: throughputRatio == null || PROFILE !== 'default' ? null : throughputRatio >= 1,
      },
      throughputCold: {
        value: coldRatio,
        reads:
          'the same with SHiNE measured as before the thirty-third session: 3 000 pairs, 20 × 4 in flight, its first seconds counted',
      },
      p99: {
        value: p99Ratio,
        reads: `Prosody one-way p99 ÷ SHiNE send → delivered p99, both at ${RATE}/s; ≥ 1.0 = SHiNE's p99 no higher (target 2)`,
        targetMet: p99Ratio == null || PROFILE !== 'default' ? null : p99Ratio >= 1,
      },
      p99OfOneFsync: {
        value: ratio(p?.fixedRate.oneWayMsP99, floor.p99Ms),
        reads:
          'Prosody one-way p99 ÷ the p99 of one fdatasync on this disk, same run: the most target 2 can read while send → delivered waits for any fsync (it waits for three in series)',
      },
      p50: {
        value: ratio(p?.fixedRate.oneWayMsP50, shine.fixedRate.sendToDeliveredMsP50),
        reads: 'Prosody p50 ÷ SHiNE p50 (same reading as p99; no target)',
      },
    },
  }),
);
