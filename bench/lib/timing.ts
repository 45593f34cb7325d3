/** Wall-clock timing of one piece of work, for benches that time reads on a store in their own process. */
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
