/**
 * What stopped a process's event loop, with wall-clock times, for bench/lib/tail.ts. Loaded with
 * `--require` (NODE_OPTIONS) into the servers bench/lib/federated-load.ts starts when BENCH_TAIL=1, and
 * required by the bench itself. On the main thread only, while SHINE_BENCH_TAIL_DIR is set, it appends
 * one line per event to SHINE_BENCH_TAIL_DIR/<pid>.log:
 *   gc <start, ms since the epoch> <duration ms>      each garbage-collection pause
 *   stall <start> <duration ms>                       a 1 ms timer that fired 3 ms or more late
 * A stall is the event loop held by anything: synchronous work, a COMMIT waiting for its fsync, a GC
 * pause, or the process waiting for a core. The 1 ms timer costs the process some CPU of its own, so
 * compare runs with BENCH_TAIL=1 only with each other.
 */
'use strict';
const { isMainThread } = require('node:worker_threads');

const dir = process.env.SHINE_BENCH_TAIL_DIR;
if (dir && isMainThread) {
  const { PerformanceObserver, performance } = require('node:perf_hooks');
  const { appendFileSync } = require('node:fs');
  const { join } = require('node:path');
  const file = join(dir, `${process.pid}.log`);
  const at = (t) => (performance.timeOrigin + t).toFixed(2);
  // Written at once (a few lines a second), so the bench can read them as soon as its phase ends; once
  // the bench has removed the folder, nothing more is written.
  let open = true;
  const write = (line) => {
    if (!open) return;
    try {
      appendFileSync(file, line + '\n');
    } catch {
      open = false;
    }
  };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) write(`gc ${at(e.startTime)} ${e.duration.toFixed(2)}`);
  }).observe({ entryTypes: ['gc'] });
  let last = performance.now();
  setInterval(() => {
    const now = performance.now();
    if (now - last >= 4) write(`stall ${at(last + 1)} ${(now - last - 1).toFixed(2)}`);
    last = now;
  }, 1).unref();
}
