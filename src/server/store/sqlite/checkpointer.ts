/**
 * WAL checkpoints on a worker thread, off the event loop (docs/performance.md, "Checkpoints off the
 * event loop"). The writing connection runs with `wal_autocheckpoint = 0`; after its commits, this
 * thread's own connection runs `PRAGMA wal_checkpoint(PASSIVE)`, which copies committed pages from the
 * WAL into the database file and fsyncs that file while the event loop goes on committing to the WAL.
 *
 * The WAL starts over (is written again from its start) only when a write transaction begins with every
 * frame copied. Under steady writes some commit always lands while a checkpoint runs, so each turn has
 * two steps: the bulk copy while the writer commits, then, with the writer's next commits held back
 * (queued, not blocking the event loop; at most 200 ms), a short pass that copies what those commits
 * left. The writer then starts the WAL over.
 *
 * Durability does not move: every write is on disk when its COMMIT returns (the WAL is fsynced there);
 * a checkpoint only copies what is already durable. If the WAL still grows past `maxWalBytes` (another
 * process keeps the checkpoints from finishing), the writer checkpoints on its own connection; if the
 * thread dies, the writer goes back to SQLite's own checkpoints on commit.
 */
import type { Worker } from 'node:worker_threads';
import { BusyRef, evalWorker } from '../../worker-thread.js';

/** The worker (../../worker-thread.ts). */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.paths['better-sqlite3']);
const db = new Database(workerData.path);
db.pragma('synchronous = FULL');
parentPort.on('message', (step) => {
  if (step === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  const t0 = performance.now();
  try {
    const [r] = db.pragma('wal_checkpoint(PASSIVE)');
    parentPort.postMessage({ step, busy: r.busy, log: r.log, checkpointed: r.checkpointed, ms: performance.now() - t0 });
  } catch (err) {
    parentPort.postMessage({ step, error: String((err && err.message) || err) });
  }
});
`;

type Step = 'bulk' | 'final';

const WAL_FRAME_HEADER_BYTES = 24;
/** Longest the writer's commits are held for a final pass; past it they go on (no restart this turn). */
const MAX_HOLD_MS = 200;
/** After a final pass that could not copy every frame, turns hold no commits for this long. */
const NO_HOLD_AFTER_INCOMPLETE_MS = 5000;

interface Reply {
  step: Step;
  busy?: number;
  log?: number;
  checkpointed?: number;
  ms?: number;
  error?: string;
}

export interface CheckpointStats {
  /** Turns of the thread (a bulk copy, and when the WAL is long a final pass with the writer held). */
  checkpoints: number;
  /** Final passes. */
  restarts: number;
  /** Final passes that left every frame copied, so the writer's next transaction started the WAL over. */
  complete: number;
  /** Time of the bulk copies on the thread, ms. */
  bulkMs: number;
  /** Time of the final passes, ms: the writer's commits wait this long. */
  finalMs: number;
  /** Times the writer checkpointed on its own connection because the WAL was past the limit. */
  inline: number;
}

export interface CheckpointerOptions {
  path: string;
  pageSize: number;
  /** Least time between the starts of two turns: pages written again meanwhile are copied once. */
  intervalMs: number;
  /** WAL size from which a turn ends with a final pass, so that the WAL starts over. */
  restartBytes: number;
  /** WAL size past which the writer checkpoints itself. */
  maxWalBytes: number;
  /** Runs one checkpoint on the writer's connection (the WAL is past maxWalBytes). */
  inline: () => void;
  /**
   * Holds the writer's commits back (they queue), and lets them go again; a promise, when holding, that
   * resolves once commits already on their way are done (a second writer's: ./threaded.ts, `auto`).
   */
  hold: (held: boolean) => Promise<void> | void;
  /** The thread is gone: the writer goes back to SQLite's own checkpoints on commit. */
  onFailure: () => void;
}

/**
 * The thread starts with the first commit: a process that opens the store only to read it (a CLI
 * command) starts none.
 */
export class Checkpointer {
  readonly stats: CheckpointStats = { checkpoints: 0, restarts: 0, complete: 0, bulkMs: 0, finalMs: 0, inline: 0 };
  private thread: { worker: Worker; busy: BusyRef } | null = null;
  private dirty = false;
  private running = false;
  private timer: NodeJS.Timeout | null = null;
  private holdTimer: NodeJS.Timeout | null = null;
  /** No final pass before this time (after one that could not finish). */
  private noHoldUntil = 0;
  private lastStart = 0;
  private broken = false;
  private closed = false;
  /** Frames in the WAL at the last pass. */
  private walFrames = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly opts: CheckpointerOptions) {}

  /** Whether the thread has started (it does at the first commit). */
  get threadStarted(): boolean {
    return this.thread !== null;
  }

  private started(): { worker: Worker; busy: BusyRef } {
    if (this.thread) return this.thread;
    const worker = evalWorker(WORKER_SOURCE, ['better-sqlite3'], { path: this.opts.path });
    worker.on('message', (r: Reply) => this.answered(r));
    worker.on('error', () => this.breakDown());
    worker.on('exit', () => this.breakDown());
    return (this.thread = { worker, busy: new BusyRef(worker) });
  }

  /** Called after each commit of the writer. */
  committed(): void {
    if (this.closed || this.broken) return;
    if (this.walBytes() > this.opts.maxWalBytes) {
      this.stats.inline++;
      this.walFrames = 0;
      try {
        this.opts.inline();
      } catch {
        // An I/O error here fails no write (they are committed); the thread's next turn tries again.
      }
    }
    this.dirty = true;
    this.schedule();
  }

  private walBytes(): number {
    return this.walFrames * (this.opts.pageSize + WAL_FRAME_HEADER_BYTES);
  }

  /** Resolves when no checkpoint is running or waiting (tests and benchmarks). */
  idle(): Promise<void> {
    if (!this.running && !this.dirty) return Promise.resolve();
    this.timer?.ref();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.running || this.timer || !this.dirty || this.closed) return;
    const wait = this.lastStart + this.opts.intervalMs - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.schedule();
      }, wait);
      // A turn keeps no process alive, unless someone waits for it (idle()).
      if (this.idleWaiters.length === 0) this.timer.unref();
      return;
    }
    this.dirty = false;
    this.running = true;
    this.lastStart = performance.now();
    const { worker, busy } = this.started();
    busy.begin(); // until the turn ends
    worker.postMessage('bulk' satisfies Step);
  }

  private answered(r: Reply): void {
    // Another connection's checkpoint held the lock (with `auto`, the other writer's checkpoint thread, ./threaded.ts;
    // or another process's): SQLite copied and counted nothing (log -1), and the next turn tries again.
    const locked = r.error === undefined && r.busy !== 0 && r.log === -1;
    if (r.error === undefined && !locked) this.walFrames = r.log ?? 0;
    if (locked) this.dirty = true;
    else if (r.step === 'bulk') {
      this.stats.bulkMs += r.ms ?? 0;
      // Once the WAL is long, the frames commits left behind during the bulk copy are copied with the
      // writer held, so that it starts the WAL over.
      if (
        r.error === undefined &&
        !this.closed &&
        this.walBytes() >= this.opts.restartBytes &&
        performance.now() >= this.noHoldUntil
      ) {
        const { worker } = this.thread!;
        const held = this.opts.hold(true);
        this.holdTimer = setTimeout(() => this.release(), MAX_HOLD_MS);
        this.holdTimer.unref();
        const final = () => worker.postMessage('final' satisfies Step);
        if (held) void held.then(final);
        else final();
        return;
      }
    } else {
      this.stats.finalMs += r.ms ?? 0;
      this.stats.restarts++;
      if (r.error === undefined && r.busy === 0 && r.checkpointed === r.log) this.stats.complete++;
      // Something else (another process's reader) kept it from finishing: holding the writer again soon
      // would not help, so the next turns copy without it for a while.
      else this.noHoldUntil = performance.now() + NO_HOLD_AFTER_INCOMPLETE_MS;
    }
    if (r.error === undefined && !locked) this.stats.checkpoints++;
    this.release();
    this.running = false;
    this.thread!.busy.end();
    this.schedule();
    if (!this.running && !this.dirty) for (const w of this.idleWaiters.splice(0)) w();
  }

  /** Lets the writer's commits go (a hold's end). */
  private release(): void {
    if (this.holdTimer) {
      clearTimeout(this.holdTimer);
      this.holdTimer = null;
    }
    void this.opts.hold(false);
  }

  private breakDown(): void {
    if (this.closed || this.broken) return;
    this.broken = true;
    this.running = false;
    this.dirty = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.release();
    this.opts.onFailure();
    for (const w of this.idleWaiters.splice(0)) w();
  }

  /** Stops the thread after the pass it is running, and closes its connection. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.dirty = false;
    if (this.thread && !this.broken) {
      const { worker, busy } = this.thread;
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
      busy.begin(); // until it exits
      worker.postMessage('close');
      await exited;
    }
    this.release();
    for (const w of this.idleWaiters.splice(0)) w();
  }

  /** Ends the thread at once, as a crash would (tests of the fallback). */
  async kill(): Promise<void> {
    const { worker, busy } = this.started();
    busy.begin(); // an unref'd thread's exit would not keep the caller's process waiting for it
    await worker.terminate();
  }
}
