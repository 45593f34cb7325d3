/**
 * The SQLite store with its writes on a thread of their own (SHINE_SQLITE_WRITER=thread; docs/performance.md,
 * "Issue 12, eleventh session", says when it pays). The event loop keeps a connection that only reads; every call that writes — every method
 * whose work goes through SqliteDb.write — runs whole on the writer thread (./thread.ts), with the group
 * commit, its fsync and the checkpoints. A write is answered after its commit, as on one connection,
 * and a read issued after that answer sees it (WAL: each read starts from the newest commit).
 *
 * With SHINE_SQLITE_WRITER=auto (the default) the event loop's connection writes too, and the store routes
 * each call's writes to one side or the other by load (WriteRouter below; docs/performance.md, thirtieth
 * session). Each connection has its own checkpoint thread, run by its own commits: the WAL is checkpointed
 * from the side that is writing, and that side's final passes hold its own commits only, between two of them.
 */
import { once } from 'node:events';
import { mkdirSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ErrorCode, ErrorDetails } from '../../../protocol/errors.js';
import { ShineError } from '../../../protocol/errors.js';
import { BusyRef, bundleForNode, perTurn } from '../../worker-thread.js';
import type { Store } from '../types.js';
import type { CheckpointStats } from './checkpointer.js';
import type { WriteRouter } from './db.js';
import { SqliteArea, SqliteDb, WRITES_ELSEWHERE } from './db.js';
import type { SqliteStoreOptions } from './store.js';
import { SqliteStore } from './store.js';

/** A call sent to the writer thread: a method of an area, or (area null) of the store itself. */
export interface ThreadCall {
  id: number;
  area: string | null;
  method: string;
  args: unknown[];
}

export interface ThreadReply {
  id: number;
  value?: unknown;
  error?: { message: string; code?: ErrorCode; details?: ErrorDetails | undefined; sqliteCode?: string | undefined };
}

/** Answers the writer thread sends in one message, with its commit counters at that time. */
export interface ThreadReplies {
  replies: ThreadReply[];
  stats: { commits: number; writes: number; checkpoints: number };
}

/**
 * Starts the thread's module, which sits beside this one: JavaScript once built (or bundled, as the tests
 * do). Under tsx, whose loader a thread does not inherit, the thread's TypeScript is bundled once per
 * process with esbuild (both are development packages): loading it through tsx in every thread took about
 * a second a start.
 */
async function startThread(workerData: Record<string, unknown>): Promise<Worker> {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./thread.js', import.meta.url), { workerData });
  return new Worker(await (devBundle ??= bundleForDevelopment()), { workerData });
}

let devBundle: Promise<string> | null = null;

async function bundleForDevelopment(): Promise<string> {
  // Inside the repository, so the bundle's packages resolve from its node_modules.
  const dir = fileURLToPath(new URL(`../../../../.tmp/sqlite-thread/${process.pid}/`, import.meta.url));
  mkdirSync(dir, { recursive: true });
  const outfile = join(dir, 'thread.mjs');
  await bundleForNode(fileURLToPath(new URL('./thread.ts', import.meta.url)), outfile);
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return outfile;
}

/** Where a SQLite store writes (SHINE_SQLITE_WRITER): on the event loop, on a thread, or on either by load. */
export type SqliteWriter = 'inline' | 'thread' | 'auto';

/**
 * Inline writes a group commit holds from which, in `auto`, the writes that follow go to the thread (where a core
 * idles); they come back to the event loop once the thread has none in flight and its commits hold fewer than half
 * as many (docs/performance.md, thirtieth session).
 */
const AUTO_THREAD_FROM_JOBS = 8;
/** Cores the machine must leave idle under the load for `auto` to move writes to the thread. */
const AUTO_THREAD_IDLE_CORES = 0.5;
/** The shortest time over which `auto` reads the machine's idle cores. */
const IDLE_WINDOW_MS = 200;

/**
 * The cores the machine leaves idle while the event loop's commits run large (`auto`): measured from the first
 * large commit of a run of them, over at least IDLE_WINDOW_MS, so a reading covers only a loaded time.
 */
class IdleCores {
  private since: { at: number; idleMs: number } | null = null;

  constructor(private readonly windowMs: number) {}

  private static idleMs(): number {
    return cpus().reduce((sum, c) => sum + c.times.idle, 0);
  }

  /** After a large commit: the idle cores over the window that just closed, or null while it is open. */
  loaded(): number | null {
    const at = performance.now();
    if (!this.since) {
      this.since = { at, idleMs: IdleCores.idleMs() };
      return null;
    }
    if (at - this.since.at < this.windowMs) return null;
    const idleMs = IdleCores.idleMs();
    const cores = (idleMs - this.since.idleMs) / (at - this.since.at);
    this.since = { at, idleMs };
    return cores;
  }

  /** The load is over (a small commit, or writes back from the thread): the next window starts afresh. */
  reset(): void {
    this.since = null;
  }
}

/**
 * With `thread`, starts the writer thread on the file, then opens the event loop's connection beside it, one that
 * only reads. With `auto`, opens the event loop's connection, which writes while the load is light, with checkpoints
 * of its own; the writer thread starts when the load first asks for it.
 */
export async function openThreadedSqliteStore(
  opts: SqliteStoreOptions,
  writer: Exclude<SqliteWriter, 'inline'> = 'thread',
  tuning: AutoTuning = {},
): Promise<Store> {
  if (writer === 'auto')
    return new ThreadedSqliteStore(null, new SqliteDb(Object.assign({}, opts, { role: 'writer' })), { tuning, opts });
  const worker = await startReadyThread(opts);
  return new ThreadedSqliteStore(worker, new SqliteDb(Object.assign({}, opts, { role: 'reader' })));
}

/** A writer thread on the file, once it has opened it in WAL mode (rejects if the thread fails first). */
async function startReadyThread(opts: SqliteStoreOptions): Promise<Worker> {
  const worker = await startThread({ options: opts });
  try {
    await once(worker, 'message'); // 'ready'
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  return worker;
}

/** `auto`'s thresholds (tests make the move to the thread not wait for the machine); defaults above and below. */
export interface AutoTuning {
  idleCores?: number;
  idleWindowMs?: number;
}

/** The areas of the Store (meta, messages, …): the reading store's, each routed (see `routed`). */
type Areas = Omit<Store, 'dialect' | 'commitStats' | 'migrate' | 'ping' | 'close'>;
// The areas are set in the constructor, one per area of the reading SqliteStore.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export interface ThreadedSqliteStore extends Areas {
  readonly dialect: 'sqlite';
}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class ThreadedSqliteStore implements Store, WriteRouter {
  readonly dialect = 'sqlite';

  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  /** The calls of one turn go in one message, so their writes share a commit on the thread. */
  private readonly post = perTurn<ThreadCall>((calls) => {
    // A thread that stopped meanwhile has had every pending call rejected (stop).
    if (this.stopped) return;
    if (this.held) this.heldCalls.push(...calls);
    else this.send(calls);
  });
  /** Calls sent to the thread and not yet answered. */
  private inFlight = 0;
  /** `auto`: while this connection's checkpoint thread's final pass holds commits, calls for the thread wait here. */
  private held = false;
  private heldCalls: ThreadCall[] = [];
  /** `auto`: a hold's wait for the calls already sent. */
  private flightWaiters: (() => void)[] = [];
  private stats = { commits: 0, writes: 0, checkpoints: 0 };
  /** Why the thread stopped, once it has: every later write fails with it (`auto`: writes go on at the event loop). */
  private stopped: ShineError | null = null;
  /** The writer thread (`auto`: null until it has started), and what keeps the process alive while it has calls. */
  private worker: Worker | null = null;
  private busy: BusyRef | null = null;
  /** `auto`: the writer thread's start, once asked for (it never rejects: a failed start stops the store's thread). */
  private starting: Promise<void> | null = null;
  /** `auto`: calls sent before the thread was ready; they go once it is. */
  private unsent: ThreadCall[] = [];
  /** `auto`: the options the writer thread opens the file with. */
  private readonly threadOpts: SqliteStoreOptions | null;
  private readonly reads: SqliteStore;
  /** `auto`: while a routed call's first synchronous part runs (its writes are routed; later ones stay here). */
  private routing = false;
  /** `auto`: whether a routed call's writes go to the thread when neither side has any in flight. */
  private preferThread = false;
  private readonly auto: boolean;
  /** `auto`: the machine's idle cores (the thread pays only where a core would idle otherwise). */
  private readonly idle: IdleCores | null;
  private readonly idleCores: number;
  /** `auto`: writes a commit of the thread held, on average, in its last answered turn. */
  private threadBatch = 0;

  /**
   * @param worker the writer thread, ready (`thread`); null with `auto`, which starts it when the load asks for it
   * @param reader the event loop's connection: only reading (`thread`), or writing too (`auto`: the store
   *   routes each call's writes, see WriteRouter)
   */
  constructor(
    worker: Worker | null,
    private readonly reader: SqliteDb,
    auto: { tuning: AutoTuning; opts: SqliteStoreOptions } | null = null,
  ) {
    if (worker) this.attach(worker);
    this.reads = new SqliteStore(reader);
    this.auto = auto !== null;
    this.threadOpts = auto?.opts ?? null;
    this.idle = auto && new IdleCores(auto.tuning.idleWindowMs ?? IDLE_WINDOW_MS);
    this.idleCores = auto?.tuning.idleCores ?? AUTO_THREAD_IDLE_CORES;
    if (auto) reader.router = this;
    const self = this as unknown as Record<string, unknown>;
    for (const [name, area] of Object.entries(this.reads))
      if (area instanceof SqliteArea) self[name] = this.routed(name, area);
  }

  /** Both connections' (with `thread` the event loop's reads only: it commits and checkpoints nothing). */
  commitStats(): { commits: number; writes: number; checkpoints: number } {
    const here = this.reads.commitStats();
    return {
      commits: this.stats.commits + here.commits,
      writes: this.stats.writes + here.writes,
      checkpoints: this.stats.checkpoints + here.checkpoints,
    };
  }

  /** `auto`: commits and writes made on each side (tests and benchmarks). */
  sides(): { eventLoop: { commits: number; writes: number }; thread: { commits: number; writes: number } } {
    const here = this.reads.commitStats();
    return {
      eventLoop: { commits: here.commits, writes: here.writes },
      thread: { commits: this.stats.commits, writes: this.stats.writes },
    };
  }

  async migrate(): Promise<void> {
    await (this.auto ? this.reads.migrate() : this.call(null, 'migrate', []));
  }

  // WriteRouter (`auto`). At most one side has writes waiting or in flight at a time, so neither waits for the
  // other's lock: a routed write goes where writes already are, else where the load says.
  here(queued: number): boolean {
    if (!this.routing || this.stopped) return true;
    if (queued > 0) return true;
    return this.pending.size === 0 && !this.preferThread;
  }

  mayCommit(): boolean {
    return this.pending.size === 0;
  }

  committed(jobs: number): void {
    if (this.preferThread) return;
    if (jobs < AUTO_THREAD_FROM_JOBS / 2) this.idle!.reset();
    if (jobs < AUTO_THREAD_FROM_JOBS) return;
    const idle = this.idle!.loaded();
    if (idle === null || idle < this.idleCores) return;
    // The first time: the thread starts now, and the writes move at the next reading, once it is ready.
    if (this.worker) this.preferThread = true;
    else void this.start();
  }

  /** `auto`: whether the writer thread has started (tests: a light load never starts it). */
  get threadStarted(): boolean {
    return this.worker !== null;
  }

  /** `auto`: starts the writer thread, once; the calls sent meanwhile go when it is ready. */
  private start(): Promise<void> {
    return (this.starting ??= startReadyThread(this.threadOpts!).then(
      async (worker) => {
        if (this.stopped)
          await worker.terminate(); // closed meanwhile
        else this.attach(worker);
      },
      (err: unknown) => this.stop(`failed to start: ${err instanceof Error ? err.message : String(err)}`),
    ));
  }

  /** Takes the writer thread's answers from now on, and sends it what waited for it. */
  private attach(worker: Worker): void {
    this.worker = worker;
    this.busy = new BusyRef(worker);
    worker.unref();
    for (let i = 0; i < this.pending.size; i++) this.busy.begin();
    worker.on('message', (m: ThreadReplies) => this.answered(m));
    worker.on('error', (err) => this.stop(`failed: ${err.message}`));
    worker.on('exit', (code) => this.stop(`exited with ${code}`));
    const calls = this.unsent.splice(0);
    if (calls.length > 0) worker.postMessage(calls);
  }

  hold(held: boolean): Promise<void> | void {
    this.held = held;
    if (!held) {
      this.landed();
      const calls = this.heldCalls.splice(0);
      if (calls.length > 0 && !this.stopped) this.send(calls);
      return;
    }
    if (this.inFlight > 0) return new Promise((resolve) => this.flightWaiters.push(resolve));
  }

  private send(calls: ThreadCall[]): void {
    this.inFlight += calls.length;
    if (this.worker) this.worker.postMessage(calls);
    else {
      this.unsent.push(...calls);
      void this.start();
    }
  }

  /** Lets a hold's final pass start: nothing sent is still in flight, or the hold is over. */
  private landed(): void {
    for (const w of this.flightWaiters.splice(0)) w();
  }

  /**
   * A PRAGMA on the writer's connection (`auto`: on both, answering the event loop's); answers its first value
   * (tests set the connections' limits with it).
   */
  async writerPragma(text: string): Promise<unknown> {
    const thread = await this.call(null, 'pragma', [text]);
    return this.auto ? this.reader.conn.pragma(text, { simple: true }) : thread;
  }

  /** The writer thread's checkpoint counters once no turn of its checkpoint thread runs (tests and benchmarks). */
  async threadCheckpoints(): Promise<CheckpointStats | null> {
    return (await this.call(null, 'checkpoints', [])) as CheckpointStats | null;
  }

  /** The database file. */
  get path(): string {
    return this.reader.conn.name;
  }

  async ping(): Promise<void> {
    if (this.stopped && !this.auto) throw this.stopped;
    await this.reads.ping();
  }

  async close(): Promise<void> {
    await this.starting;
    if (!this.stopped && this.worker) await this.call(null, 'close', []);
    this.stopped ??= new ShineError('INTERNAL', 'database closed');
    await this.worker?.terminate();
    // Calls sent after 'close' (`auto` routes there while it is in flight) get no answer from the thread now.
    this.abandon(this.stopped);
    // `auto`: this connection's own queue, now that nothing is in flight (mayCommit), then its checkpoints.
    await (this.auto ? this.reads.close() : this.reader.conn.close());
  }

  /** Ends the writer thread as a crash would (tests): later writes fail, reads go on. */
  async kill(): Promise<void> {
    if (!this.worker) await this.start();
    await this.worker?.terminate();
  }

  /**
   * An area whose methods run on the reading connection until one reaches SqliteDb.write; that call is
   * then sent whole to the writer thread (nothing was written here: the reader cannot write).
   */
  private routed(area: string, reads: object): object {
    // By function, not by name: a method replaced on the area (tests do) is routed as it is now.
    const methods = new WeakMap<object, (...args: unknown[]) => unknown>();
    const route =
      (method: string, fn: (...args: unknown[]) => unknown) =>
      (...args: unknown[]) => {
        const elsewhere = (err: unknown) => {
          if (err === WRITES_ELSEWHERE) return this.call(area, method, args);
          throw err;
        };
        this.routing = this.auto;
        try {
          const r = fn.apply(reads, args);
          return r instanceof Promise ? r.catch(elsewhere) : r;
        } catch (err) {
          return elsewhere(err);
        } finally {
          this.routing = false;
        }
      };
    return new Proxy(reads, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== 'function' || typeof prop !== 'string') return value;
        let m = methods.get(value);
        if (!m) methods.set(value, (m = route(prop, value as (...args: unknown[]) => unknown)));
        return m;
      },
    });
  }

  private call(area: string | null, method: string, args: unknown[]): Promise<unknown> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextId++;
    this.post({ id, area, method, args });
    this.busy?.begin();
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  private answered(m: ThreadReplies): void {
    const commits = m.stats.commits - this.stats.commits;
    if (commits > 0) this.threadBatch = (m.stats.writes - this.stats.writes) / commits;
    this.stats = m.stats;
    this.inFlight -= m.replies.length;
    if (this.inFlight === 0) this.landed();
    for (const { id, value, error } of m.replies) {
      const p = this.take(id);
      if (!error) p?.resolve(value);
      else if (error.code) p?.reject(new ShineError(error.code, error.message, { details: error.details }));
      else p?.reject(Object.assign(new Error(error.message), { code: error.sqliteCode }));
    }
    if (this.auto) this.drained();
  }

  /**
   * `auto`: once the thread has nothing in flight, writes queued here commit, and writes come back here unless
   * the thread's last commits still held many (half the threshold: a load near it does not flip at every turn).
   */
  private drained(): void {
    if (this.pending.size > 0) return;
    if (this.preferThread && (this.stopped || this.threadBatch < AUTO_THREAD_FROM_JOBS / 2)) {
      this.preferThread = false;
      this.idle!.reset();
    }
    this.reader.resume();
  }

  /** The pending call id, no longer pending. */
  private take(id: number): { resolve: (v: unknown) => void; reject: (e: unknown) => void } | undefined {
    const p = this.pending.get(id);
    if (p) {
      this.pending.delete(id);
      this.busy?.end();
    }
    return p;
  }

  private stop(why: string): void {
    if (this.stopped) return;
    this.stopped = new ShineError('INTERNAL', `the SQLite writer thread ${why}`);
    this.abandon(this.stopped);
  }

  /** Fails every call the thread has not answered; `auto`: the event loop's connection writes on alone. */
  private abandon(err: ShineError): void {
    for (const id of [...this.pending.keys()]) this.take(id)?.reject(err);
    this.heldCalls = [];
    this.unsent = [];
    this.inFlight = 0;
    this.landed();
    if (this.auto) this.drained();
  }
}
