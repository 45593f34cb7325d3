/**
 * The benches' text pairs, built on one worker thread per core before the clocks start. Sealing and signing
 * with the SDK's pure-JS crypto take about 4.5 ms a pair here, so a load of tens of thousands of pairs spent
 * minutes on one core (docs/performance.md, thirty-fifth session); each thread builds a contiguous share.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Identity } from '../../src/client/identity.js';
import type { BuiltPair, PairSender, TextRecipient } from '../../src/client/pairs.js';

/** One pair to build: senders[from] writes `text` to recipients[to] at timeMs. */
export interface PairOrder {
  from: number;
  to: number;
  text: string;
  timeMs: number;
}

/** What a builder thread gets (./build-pairs-worker.ts). */
export interface BuildJob {
  senders: PairSender[];
  recipients: TextRecipient[];
  orders: PairOrder[];
}

/**
 * A thread's start: tsx's loader registered on it (a thread does not inherit the one this process was started
 * with), then the builder module.
 */
const BOOT = `
const { workerData } = require('node:worker_threads');
import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))})
  .then((tsx) => tsx.register())
  .then(() => import(workerData.entry));
`;

/** textPair for each order, in order; the orders are shared out among the machine's cores. */
export async function buildTextPairs(
  senders: PairSender[],
  recipientIds: Pick<Identity, 'login' | 'encPublicKey'>[],
  orders: PairOrder[],
): Promise<BuiltPair[]> {
  const recipients: TextRecipient[] = recipientIds.map((r) => ({ login: r.login, encKey: r.encPublicKey }));
  const threads = Math.max(1, Math.min(availableParallelism(), Math.ceil(orders.length / 64)));
  const share = Math.ceil(orders.length / threads);
  const parts = await Promise.all(
    Array.from({ length: threads }, (_, t) => {
      const job: BuildJob = { senders, recipients, orders: orders.slice(t * share, (t + 1) * share) };
      return new Promise<BuiltPair[]>((resolve, reject) => {
        const worker = new Worker(BOOT, {
          eval: true,
          workerData: { job, entry: new URL('./build-pairs-worker.ts', import.meta.url).href },
        });
        worker.once('message', (pairs: BuiltPair[]) => {
          resolve(pairs);
          void worker.terminate();
        });
        worker.once('error', reject);
        worker.once('exit', (code) => reject(new Error(`pair builder exited with ${code}`)));
      });
    }),
  );
  return parts.flat();
}

/** `count` consecutive runs of `size` items of `list` from index `from`: one per client. */
export function perClient<T>(list: readonly T[], count: number, size: number, from = 0): T[][] {
  return Array.from({ length: count }, (_, i) => list.slice(from + i * size, from + (i + 1) * size));
}
