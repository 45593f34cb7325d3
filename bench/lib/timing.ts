/** Wall-clock timing of one piece of work, for benches that time reads on a store in their own process. */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { median } from './percentile.js';

/** How long fn took, in milliseconds (wall clock). */
export async function elapsedMs(fn: () => unknown): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** The median of `runs` timings of fn, in milliseconds to 0.01. */
export async function medianMs(runs: number, fn: () => unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) times.push(await elapsedMs(fn));
  return +median(times).toFixed(2);
}

/** How long fn took and the event loop's longest delay meanwhile (what it stalled every other task), in ms. */
export async function timedWithStall(fn: () => unknown): Promise<{ ms: number; eventLoopMaxStallMs: number }> {
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  // Its first tick only starts the count: the block must come after it to be measured.
  await new Promise((resolve) => setTimeout(resolve, 5));
  const ms = await elapsedMs(fn);
  // The sampling timer fires late after a synchronous block: let it record that delay first.
  await new Promise((resolve) => setTimeout(resolve, 5));
  delay.disable();
  return { ms: +ms.toFixed(1), eventLoopMaxStallMs: +(delay.max / 1e6).toFixed(1) };
}
