/**
 * The one place background work runs: every task the server starts without a request waiting on it
 * (worker passes, first-attempt outcomes, forwards, peer wake-ups, replication cycles, replay after
 * login, maintenance). Each task gets the queue's AbortSignal, which close() aborts, and a task that
 * fails is logged once, with its name and context, instead of vanishing. drain() lets tests (and
 * shutdown) wait until nothing is left running, tasks started by tasks included.
 */
import { setMaxListeners } from 'node:events';
import type { LogFields, Logger } from '../log.js';

/** A background task: resolves when done; should stop early once signal is aborted. */
export type BackgroundTask = (signal: AbortSignal) => Promise<unknown>;

export class BackgroundQueue {
  private readonly running = new Set<Promise<void>>();
  private readonly controller = new AbortController();

  constructor(private readonly log: Logger) {
    // Every call a task waits on listens for the close (untilAborted): a replication cycle has dozens at once.
    setMaxListeners(0, this.controller.signal);
  }

  /** Aborted when the queue closes: long tasks check it between steps. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Tasks running now. */
  get size(): number {
    return this.running.size;
  }

  /** Starts task now; its failure is logged with name and context. After close() nothing new starts. */
  run(name: string, context: LogFields, task: BackgroundTask): void {
    if (this.signal.aborted) {
      this.log.debug('background task not started: shutting down', { task: name, ...context });
      return;
    }
    // Started on a later tick, so a task that throws at once is caught like one that rejects.
    const done: Promise<void> = Promise.resolve()
      .then(() => task(this.signal))
      .then(
        () => undefined,
        (err: unknown) => {
          // A task that ends with the shutdown's own abort (a retry's wait, a call cut short) did not fail.
          if (this.signal.aborted && err === this.signal.reason)
            this.log.debug('background task stopped: shutting down', Object.assign({ task: name }, context));
          else this.log.error('background task failed', Object.assign({ task: name }, context, { err }));
        },
      )
      .finally(() => this.running.delete(done));
    this.running.add(done);
  }

  /** Resolves once no task is running, including tasks that running tasks start meanwhile. */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.all([...this.running]);
  }

  /** Aborts every task's signal and refuses new tasks (shutdown begins). */
  abort(): void {
    if (!this.signal.aborted) this.controller.abort(new Error('server shutting down'));
  }

  /** Aborts, then waits for the tasks still running to end. */
  async close(): Promise<void> {
    this.abort();
    await this.drain();
  }
}

/**
 * Settles as p does, or rejects as soon as signal aborts (p itself runs on). p is observed even when the
 * signal was aborted before the call: a peer call that fails later, when shutdown closes the peers, must
 * not surface as an unhandled rejection (a slower store makes that ordering common).
 */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A request awaited later (pipelining): marked handled now, so that if the work before it fails first
 * and it is never awaited, its own failure is not an unhandled rejection.
 */
export function awaitedLater<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}
