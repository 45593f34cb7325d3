/**
 * What the slowest pairs of a fixed-rate phase waited for (BENCH_TAIL=1 in bench/lib/federated-load.ts).
 * Each process (both servers and the bench itself) records its GC pauses and event-loop stalls with
 * ./tail-probe.cjs; afterwards every pair at or above the p99 is matched against the pauses that overlap
 * its time from send to `delivered`. A pair overlapping a GC pause counts for GC, one overlapping only a
 * stall for the stall; a pair can count for several processes. An idle witness process carries the probe
 * as well: its stalls are the machine's, not any server's.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ascending, pct } from './percentile.js';

/** One pair: when it was sent (ms since the epoch) and how long until its sender learnt `delivered`. */
export interface PairTiming {
  sentAtMs: number;
  ms: number;
}

interface Pause {
  kind: 'gc' | 'stall';
  atMs: number;
  ms: number;
}

/** Pauses of one process during the phase, and the slow pairs they overlapped. */
export interface ProcessTail {
  gcPauses: number;
  gcMs: number;
  /** Event-loop stalls of 3 ms or more (GC pauses included). */
  stalls: number;
  stallMs: number;
  slowPairsOverGc: number;
  slowPairsOverStallOnly: number;
}

export interface TailReport {
  what: string;
  /** Pairs at or above the phase's p99. */
  slowPairs: number;
  /** Slow pairs that overlapped no pause of any process. */
  slowPairsOverNoPause: number;
  byProcess: Record<string, ProcessTail>;
  /** The p99 of the pairs that overlapped no pause of any process (what the rest of the path gives). */
  p99WithoutPausedPairsMs: number;
}

const probe = new URL('./tail-probe.cjs', import.meta.url).pathname;

/**
 * A process that does nothing but carry the probe: its stalls are what the machine does to any event
 * loop at that moment (a core taken by another process, or the virtual machine's CPU not running).
 */
function startIdleWitness(dir: string): ChildProcess {
  // It lives until its stdin closes: when stopped, or when the bench exits or dies.
  const idle = spawn(
    process.execPath,
    ['--require', probe, '-e', "process.stdin.on('end', () => process.exit()).resume()"],
    {
      env: { ...process.env, SHINE_BENCH_TAIL_DIR: dir },
      stdio: ['pipe', 'ignore', 'ignore'],
    },
  );
  idle.unref();
  (idle.stdin as unknown as { unref(): void }).unref();
  return idle;
}

/**
 * Starts recording in this process (the probe, required here) and in an idle witness process, and returns
 * the environment that makes the servers load it too, the folder the logs go to, the witness's pid and
 * how to stop it.
 */
export function startTailRecording(): {
  serverEnv: Record<string, string>;
  dir: string;
  idlePid: number;
  stop: () => void;
} {
  const dir = mkdtempSync(join(tmpdir(), 'shine-bench-tail-'));
  process.env.SHINE_BENCH_TAIL_DIR = dir;
  createRequire(import.meta.url)(probe);
  const idle = startIdleWitness(dir);
  return {
    serverEnv: { SHINE_BENCH_TAIL_DIR: dir, NODE_OPTIONS: `--require ${probe}` },
    dir,
    idlePid: idle.pid!,
    stop: () => idle.stdin!.end(),
  };
}

/** The stalls an idle process saw in `seconds` with nothing else of the bench running: the machine's own floor. */
export async function idleStallFloor(
  seconds: number,
): Promise<{ what: string; seconds: number; stalls: number; stallMs: number; maxMs: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'shine-bench-idle-'));
  const idle = startIdleWitness(dir);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const exited = new Promise((resolve) => idle.once('exit', resolve));
  idle.ref(); // waited for: it keeps this process alive until it has exited
  idle.stdin!.end();
  await exited;
  const stalls = readPauses(dir, idle.pid!).filter((p) => p.kind === 'stall');
  rmSync(dir, { recursive: true, force: true });
  return {
    what: 'event-loop stalls of 3 ms or more in an idle process with the tail probe, before the servers start',
    seconds,
    stalls: stalls.length,
    stallMs: totalMs(stalls),
    maxMs: Number(Math.max(0, ...stalls.map((p) => p.ms)).toFixed(1)),
  };
}

/** The pauses' durations added up, to 0.1 ms. */
const totalMs = (pauses: Pause[]): number => Number(pauses.reduce((sum, p) => sum + p.ms, 0).toFixed(1));

function readPauses(dir: string, pid: number): Pause[] {
  let text = '';
  try {
    text = readFileSync(join(dir, `${pid}.log`), 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [kind, at, ms] = line.split(' ');
      return { kind: kind as Pause['kind'], atMs: Number(at), ms: Number(ms) };
    });
}

/** Matches the slow pairs against the pauses of the named processes (pid by name), then removes the logs. */
export function tailReport(pairs: PairTiming[], processes: Record<string, number>, dir: string): TailReport {
  const from = Math.min(...pairs.map((p) => p.sentAtMs));
  const to = Math.max(...pairs.map((p) => p.sentAtMs + p.ms));
  const pauses = Object.fromEntries(
    Object.entries(processes).map(([name, pid]) => [
      name,
      readPauses(dir, pid).filter((p) => p.atMs + p.ms > from && p.atMs < to),
    ]),
  );
  rmSync(dir, { recursive: true, force: true });
  const overlaps = (pair: PairTiming, p: Pause): boolean =>
    p.atMs < pair.sentAtMs + pair.ms && p.atMs + p.ms > pair.sentAtMs;
  const p99 = pct(ascending(pairs.map((p) => p.ms)), 0.99);
  const slow = pairs.filter((p) => p.ms >= p99);
  const byProcess: Record<string, ProcessTail> = {};
  for (const [name, list] of Object.entries(pauses)) {
    const gcs = list.filter((p) => p.kind === 'gc');
    const stalls = list.filter((p) => p.kind === 'stall');
    const overGc = new Set(slow.filter((pair) => gcs.some((p) => overlaps(pair, p))));
    byProcess[name] = {
      gcPauses: gcs.length,
      gcMs: totalMs(gcs),
      stalls: stalls.length,
      stallMs: totalMs(stalls),
      slowPairsOverGc: overGc.size,
      slowPairsOverStallOnly: slow.filter((pair) => !overGc.has(pair) && stalls.some((p) => overlaps(pair, p))).length,
    };
  }
  const all = Object.values(pauses).flat();
  const unpaused = new Set(pairs.filter((pair) => !all.some((p) => overlaps(pair, p))));
  return {
    what: "pairs at or above the p99 against each process's main-thread GC pauses and event-loop stalls of 3 ms or more (bench/lib/tail-probe.cjs: a 1 ms timer in each process)",
    slowPairs: slow.length,
    slowPairsOverNoPause: slow.filter((pair) => unpaused.has(pair)).length,
    byProcess,
    p99WithoutPausedPairsMs: pct(ascending([...unpaused].map((p) => p.ms)), 0.99),
  };
}
