/**
 * Ed25519 checks in bulk, for paths that hold many signatures at once (a replication page: up to 500
 * rows, two signatures each). With threads > 0 they run on worker threads with libsodium, so the event
 * loop stores one page while the next one is checked; with 0 they run inline with sodiumVerifier.
 * Answers are the same either way: a boolean per job, false for any malformed input.
 */
import type { Worker } from 'node:worker_threads';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { BusyRef, evalWorker } from '../worker-thread.js';
import { sodiumVerifier } from './verifier.js';

export interface VerifyJob {
  signature: Uint8Array;
  message: Uint8Array;
  publicKey: Uint8Array;
}

export interface BulkVerifier {
  /** One answer per job, in order. */
  verifyMany(jobs: readonly VerifyJob[]): Promise<boolean[]>;
  close(): Promise<void>;
}

const SIGNATURE_BYTES = 64;
const PUBLIC_KEY_BYTES = 32;
/** Below this many jobs a chunk is not split further across workers: a message costs more than a check. */
const MIN_CHUNK = 32;

/** The worker (../worker-thread.ts). */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const sodium = require(workerData.paths['sodium-native']);
parentPort.on('message', ({ id, data, messageLengths }) => {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const results = new Uint8Array(messageLengths.length);
  let at = 0;
  for (let i = 0; i < messageLengths.length; i++) {
    const sig = buf.subarray(at, at + ${SIGNATURE_BYTES});
    const pk = buf.subarray(at + ${SIGNATURE_BYTES}, at + ${SIGNATURE_BYTES + PUBLIC_KEY_BYTES});
    const msg = buf.subarray(at + ${SIGNATURE_BYTES + PUBLIC_KEY_BYTES}, at + ${SIGNATURE_BYTES + PUBLIC_KEY_BYTES} + messageLengths[i]);
    at += ${SIGNATURE_BYTES + PUBLIC_KEY_BYTES} + messageLengths[i];
    let ok = false;
    try { ok = sodium.crypto_sign_verify_detached(sig, msg, pk); } catch {}
    results[i] = ok ? 1 : 0;
  }
  parentPort.postMessage({ id, results }, [results.buffer]);
});
`;

/** Checks on the event loop with `verifier`, one after another. */
export function inlineBulkVerifier(verifier: SignatureVerifier = sodiumVerifier): BulkVerifier {
  return {
    async verifyMany(jobs) {
      return jobs.map((j) => verifier.verify(j.signature, j.message, j.publicKey));
    },
    async close() {},
  };
}

interface Pending {
  worker: Worker;
  resolve: (results: Uint8Array) => void;
  reject: (err: unknown) => void;
}

/** A fixed set of worker threads; each bulk call is cut into one chunk per worker. */
export class VerifyPool implements BulkVerifier {
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private next = 0;
  private closed = false;
  /** A thread died (it should not): the rest of this pool's life checks inline. */
  private broken = false;
  /** An idle thread keeps no process alive; one with work in flight does, until its answer is back. */
  private readonly busy = new Map<Worker, BusyRef>();

  constructor(threads: number) {
    for (let i = 0; i < threads; i++) {
      const w = evalWorker(WORKER_SOURCE, ['sodium-native']);
      w.on('message', ({ id, results }: { id: number; results: Uint8Array }) => {
        const p = this.pending.get(id);
        this.pending.delete(id);
        if (p) this.busy.get(p.worker)!.end();
        p?.resolve(results);
      });
      w.on('error', (err) => this.breakDown(err));
      w.on('exit', () => this.breakDown(new Error('verify thread exited')));
      this.workers.push(w);
      this.busy.set(w, new BusyRef(w));
    }
  }

  async verifyMany(jobs: readonly VerifyJob[]): Promise<boolean[]> {
    if (this.closed) throw new Error('verify pool closed');
    if (this.broken) return inlineBulkVerifier().verifyMany(jobs);
    const answers = new Array<boolean>(jobs.length).fill(false);
    // Malformed lengths are answered here (false), as sodiumVerifier answers them.
    const wellFormed: number[] = [];
    jobs.forEach((j, i) => {
      if (j.signature.length === SIGNATURE_BYTES && j.publicKey.length === PUBLIC_KEY_BYTES) wellFormed.push(i);
    });
    const chunks = Math.max(1, Math.min(this.workers.length, Math.floor(wellFormed.length / MIN_CHUNK)));
    const size = Math.ceil(wellFormed.length / chunks);
    const parts: Promise<void>[] = [];
    for (let c = 0; c < chunks; c++) {
      const idx = wellFormed.slice(c * size, (c + 1) * size);
      if (idx.length === 0) continue;
      parts.push(
        this.send(idx.map((i) => jobs[i]!)).then((results) => {
          idx.forEach((jobIndex, k) => (answers[jobIndex] = results[k] === 1));
        }),
      );
    }
    await Promise.all(parts);
    return answers;
  }

  private send(jobs: VerifyJob[]): Promise<Uint8Array> {
    let bytes = 0;
    for (const j of jobs) bytes += SIGNATURE_BYTES + PUBLIC_KEY_BYTES + j.message.length;
    const data = new Uint8Array(bytes);
    const messageLengths = new Uint32Array(jobs.length);
    let at = 0;
    jobs.forEach((j, i) => {
      data.set(j.signature, at);
      data.set(j.publicKey, at + SIGNATURE_BYTES);
      data.set(j.message, at + SIGNATURE_BYTES + PUBLIC_KEY_BYTES);
      at += SIGNATURE_BYTES + PUBLIC_KEY_BYTES + j.message.length;
      messageLengths[i] = j.message.length;
    });
    const id = this.nextId++;
    const worker = this.workers[this.next++ % this.workers.length]!;
    this.busy.get(worker)!.begin();
    return new Promise<Uint8Array>((resolve, reject) => {
      this.pending.set(id, { worker, resolve, reject });
      worker.postMessage({ id, data, messageLengths }, [data.buffer, messageLengths.buffer]);
    });
  }

  private breakDown(err: unknown): void {
    if (this.closed) return;
    this.broken = true;
    this.failAll(err);
  }

  private failAll(err: unknown): void {
    for (const p of this.pending.values()) {
      this.busy.get(p.worker)!.end();
      p.reject(err);
    }
    this.pending.clear();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.failAll(new Error('verify pool closed'));
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** The pool for `threads` > 0, else inline checks. */
export function bulkVerifier(threads: number): BulkVerifier {
  return threads > 0 ? new VerifyPool(threads) : inlineBulkVerifier();
}
