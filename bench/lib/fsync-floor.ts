/**
 * The disk's own floor under a durable answer, measured in the same run as a bench: `fdatasync` after
 * each append of a WAL-sized write (what one group commit does under `synchronous=FULL`), at a fixed
 * rate, in the folder the servers keep their data in. SHiNE's send → delivered waits for three of them
 * in series (A stores the pair, B stores the copy, A records `delivered`); a server that keeps nothing
 * on disk waits for none.
 */
import { closeSync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface FsyncFloor {
  what: string;
  syncs: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export async function fsyncFloor(opts: { syncs?: number; bytes?: number; perSec?: number } = {}): Promise<FsyncFloor> {
  const syncs = opts.syncs ?? 1000;
  const bytes = opts.bytes ?? 33 * 1024;
  const perSec = opts.perSec ?? 200;
  const dir = mkdtempSync(join(tmpdir(), 'shine-bench-fsync-'));
  const fd = openSync(join(dir, 'wal'), 'w');
  const block = Buffer.alloc(bytes, 0x5a);
  const took: number[] = [];
  try {
    for (let i = 0, at = 0; i < syncs; i++, at = (at + bytes) % (16 * 1024 * 1024)) {
      writeSync(fd, block, 0, bytes, at);
      const t0 = performance.now();
      fdatasyncSync(fd);
      took.push(performance.now() - t0);
      await sleep(1000 / perSec);
    }
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
  took.sort((a, b) => a - b);
  const at = (q: number): number => Number(took[Math.min(took.length - 1, Math.floor(q * took.length))]!.toFixed(2));
  return {
    what: `fdatasync after each ${bytes}-byte append, ${perSec}/s, in ${tmpdir()} (where the servers keep their data)`,
    syncs,
    p50Ms: at(0.5),
    p99Ms: at(0.99),
    maxMs: Number(took.at(-1)!.toFixed(2)),
  };
}
