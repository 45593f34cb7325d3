/** A pair builder thread of ./build-pairs.ts: builds its job's orders and posts them back in order. */
import { parentPort, workerData } from 'node:worker_threads';
import { textPair } from '../../src/client/pairs.js';
import type { BuildJob } from './build-pairs.js';

const { senders, recipients, orders } = (workerData as { job: BuildJob }).job;
parentPort!.postMessage(orders.map((o) => textPair(senders[o.from]!, recipients[o.to]!, o.text, { timeMs: o.timeMs })));
