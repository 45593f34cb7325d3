/** Waiting on observable conditions (never on fixed sleeps). */
import { setTimeout as delay } from 'node:timers/promises';

const POLL_MS = 5;

/** Resolves once cond() is true, re-checking every few milliseconds; rejects after timeoutMs. */
export async function waitUntil(
  cond: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`waitUntil: ${what} not reached within ${timeoutMs} ms`);
    await delay(POLL_MS);
  }
}
